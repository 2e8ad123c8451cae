"""The put pipeline: the batch a put takes, the hooks run before its append (RocketMQ 5's PutMessageHook)."""
