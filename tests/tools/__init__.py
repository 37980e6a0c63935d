"""Tests of the command-line tools under tools/."""
