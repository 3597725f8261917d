"""One module per classic-group API, each a function of (state, reply_to, command, now_ms, fx):
it reads and changes `core.state.CoreState` and appends its replies, records and events to `fx`
(`core.effects.Effects`). `core.coordinator` routes each command type to its module's `handle`.
The shared rebalance machinery is `core.rebalance`; the replies by group state are
`core.group.STATE_REPLIES`."""
