"""
A subset of upstream's ``devel-common/src/tests_common`` (same import paths, same semantics).

Only what the unit tests of the series use is here; see ../README.md.
"""
