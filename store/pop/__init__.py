"""Group (POP) consumption: receive, ack, invisible time, revive, FIFO order, receipt handles, groups."""
