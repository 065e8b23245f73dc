"""Links and collectives: bytes per ring collective, time on the link a group crosses."""
