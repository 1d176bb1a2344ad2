/// Every key of a cart's `meta` rows: the state and what is kept beside it. One list, so that a
/// key is spelled once and a new one is seen here.
enum MetaKey: Hashable, Sendable {
    /// The library state (``SyncState``), as ``StateFormat`` writes it.
    case state
    /// The pending batches' rows, kept beside the state so that a step rewrites only what changed.
    case pendingRows
    /// The host cart as last taken, in its compact binary form — with the changes below.
    case hostCart
    /// The host cart's changes since ``hostCart`` was written, in the same form (a quantity of 0:
    /// the id is gone): a large cart whose few lines changed writes these, not the whole cart.
    case hostCartChanges
    /// The next pending-window deadline.
    case deadline
    /// The identity of the cart file when the last batch was made, and that batch's seq.
    case cartAtBatch
    /// Versions of the cart file known by their bytes: each one's hash and the last seq that
    /// existed when it was written (the latest 64).
    case cartVersions
    /// What a JSON Lines file was last given: its identity, size and last seq.
    case given(Projection)
    /// Set while a database of the layout before carts waits to be brought up.
    case layoutBeforeCarts
    /// A small text kept for `status` and the agent.
    case note(Note)

    /// The key as stored: a literal, bound without a copy (a key is bound at every read and
    /// write of a meta row, many times a change).
    var literal: StaticString {
        switch self {
        case .state: return "state"
        case .pendingRows: return "pendingRows"
        case .hostCart: return "hostCart"
        case .hostCartChanges: return "hostCartChanges"
        case .deadline: return "deadline"
        case .cartAtBatch: return "cartAtBatch"
        case .cartVersions: return "cartVersions"
        case .given(.outbox): return "given.outbox"
        case .given(.notifications): return "given.notifications"
        case .given(.payments): return "given.payments"
        case .layoutBeforeCarts: return "layoutBeforeCarts"
        case .note(.cartRead): return "note.cartRead"
        case .note(.cartTaken): return "note.cartTaken"
        case .note(.cartSeen): return "note.cartSeen"
        case .note(.passOK): return "note.passOK"
        case .note(.inboxDuplicates): return "note.inboxDuplicates"
        case .note(.ownStore): return "note.ownStore"
        case .note(.defaultStore): return "note.defaultStore"
        case .note(.watch): return "note.watch"
        case .note(.orderUnknown): return "note.orderUnknown"
        case .note(.heartbeat): return "note.heartbeat"
        case .note(.servesDirectory): return "note.servesDirectory"
        case .note(.clock): return "note.clock"
        case .note(.goneSince): return "note.goneSince"
        case .note(.flushed): return "note.flushed"
        case .note(.retentionClock): return "note.retentionClock"
        }
    }

    /// The key as stored.
    var text: String { literal.description }
}

/// The notes: small texts kept beside the state (what `status` tells of the last cart, the last
/// good pass, counts the library does not keep).
enum Note: String, CaseIterable, Sendable {
    /// The last read of the cart: `AT\t(taken|unchanged|rejected)\tERROR`.
    case cartRead
    /// The last cart taken: `AT\tWHAT IT NOTIFIED\t`.
    case cartTaken
    /// The identity and read time of the cart version last read (``CartReader/Seen``).
    case cartSeen
    /// When the last whole pass went through.
    case passOK
    /// How many redelivered events were taken as duplicates.
    case inboxDuplicates
    /// A tree's cart that set its own store (it no longer follows the root's default).
    case ownStore
    /// A tree's default store and mode (on the root's row): `STORE\tMODE`.
    case defaultStore
    /// How the running agent watches: `PID\tDESCRIPTION` (on the root's row).
    case watch
    /// The last time two inbox deliveries could not be ordered: `AT\tMESSAGE`.
    case orderUnknown
    /// The running agent's sign of life (on the root's row): `AT\tPID\tLAST-WHOLE-PASS-AT\tINTERVAL\tBOOT-SECONDS\tBOOT`,
    /// written at most once a minute while idle, and after passes (at most once a second).
    case heartbeat
    /// With `"database"` elsewhere, the id of the sync directory (or tree) the database serves:
    /// the one whose `.basket-sync/database-id` holds it (on the root's row).
    case servesDirectory
    /// While batches are pending: the wall clock less the boot clock, and the boot, when their
    /// windows were last set (`OFFSET BOOT`). The difference moves only when the wall clock is
    /// stepped: a step seen by it moves the windows with it.
    case clock
    /// A tree's cart whose directory left the tree: when that was first seen (seconds since
    /// 1970). Put back with its marker before ``Tree/awaySeconds``, it is served again.
    case goneSince
    /// The agent's last flushes (on the root's row): a line `DEVICE BOOT NANOSECONDS` for each
    /// file system and boot, the boot clock when its last `syncfs` that went through began
    /// (``FlushedNote``).
    case flushed
    /// The least wall clock less boot clock retention saw on this boot (`OFFSET BOOT`): it
    /// counts the time that passed from it, so that a step of the wall clock forward ages
    /// nothing (``SyncEngine/retentionNow(_:)``).
    case retentionClock
}
