"""Small RL runs of compiled bundles: assets, and the tables read back from their logs."""
