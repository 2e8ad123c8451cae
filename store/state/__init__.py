"""The broker's own state as records of the commitlog (store.state.state_log) and the local files that snapshot it."""
