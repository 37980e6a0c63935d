"""A plain program whose uncaught exception ends it."""


def inner():
    raise ValueError("the program's own error")


inner()
