"""The vendored client tests under vendor/ are run by the suite runner in their own environments, never
collected by this project's pytest."""

collect_ignore = ["vendor"]
