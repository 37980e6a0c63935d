# placeholder: filled in by the piece's owner
