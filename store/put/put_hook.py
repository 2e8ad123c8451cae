"""PutHook: a step of the put pipeline run before the append (RocketMQ 5's PutMessageHook).

DefaultMessageStore runs its hooks in order on every batch: each may rewrite the batch (move
messages to another topic, turn an encoded batch into messages, add an appended-hook) or refuse
it with a PutMessageResult, which is then the put's answer with nothing stored. After the hooks
the commitlog only appends. The store's order (store/default_message_store.py, `put_hooks`, run by store/put/put_pipeline.py):
producers' dedup ids (first: they are checked against the topic the producer named, before a
hook moves a message), half messages, timer messages, validation, delay levels (the order the
checks had before they were hooks, so a timer or half message is validated in the topic it is
stored in).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from store.put.put_batch import PutBatch
    from store.status import PutMessageResult


class PutHook(Protocol):
    @property
    def hook_name(self) -> str:
        """What the hook does, for logs and docs (RocketMQ's hookName)."""
        ...

    @property
    def sees_plain(self) -> bool:
        """Whether `before_put` can act on a plain batch (ENCODED, with no dedup id, producer group or due time): the
        pipeline gives such a batch only to the hooks that can (store/put/put_pipeline.py)."""
        ...

    def before_put(self, batch: PutBatch) -> PutMessageResult | None:
        """Rewrite `batch` in place, or refuse it: a result whose status is not PUT_OK; None to go on."""
        ...
