"""Master/slave replication over the HA port."""
