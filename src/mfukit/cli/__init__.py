"""The command line: one click group per capability; thin (parse, call the library, render)."""
