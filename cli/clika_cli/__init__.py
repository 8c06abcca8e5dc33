"""clika_cli: the `clika` and `clika-export` commands."""
