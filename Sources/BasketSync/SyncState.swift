/// Everything the library knows about one sync directory. `Codable`, so that the agent can persist
/// it after each input and resume after a restart without losing or repeating anything.
///
/// Read-only outside the package: only ``SyncStateMachine``'s inputs change it (recovery
/// included: ``SyncStateMachine/recover(from:)``), and the package's persistence writes back what
/// it stored.
public struct SyncState: Codable, Hashable, Sendable {
    /// The largest seq, `syncedThrough` or basket number basket-sync gives or takes: 2^53 − 1,
    /// a number every JSON reader keeps exact. A number past it is none basket-sync could have
    /// written: refused where it comes in, never added to.
    public static let largestSeq: UInt64 = 9_007_199_254_740_991

    /// The sync directory's id; outbox record ids are `"<syncId>-<seq>"`.
    public package(set) var syncId: String
    /// The last outbox seq written (0 before the first).
    public package(set) var lastOutboxSeq: UInt64 = 0
    /// The last notification seq written (0 before the first).
    public package(set) var lastNotificationSeq: UInt64 = 0
    /// The last payment seq written (0 before the first).
    public package(set) var lastPaymentSeq: UInt64 = 0
    /// The current Mealz basket's number; a payment or a store change starts the next one.
    public package(set) var basket: UInt64 = 1
    /// Mealz's own confirmed quantity per SKU (only SKUs above 0).
    public package(set) var confirmed: [ExactID: Int] = [:]
    /// Units per SKU the share already followed the cart down for while removals on the line were
    /// unsettled (a cart showed them first): those removals, when they settle, do not take them
    /// again.
    public package(set) var shareFollowedAhead: [ExactID: Int] = [:]
    /// Batches sent to the host and not yet settled, in seq order.
    public package(set) var pending: [PendingBatch] = []
    /// The most recent batches rolled back, kept to report a late echo.
    public package(set) var rolledBack: [PendingBatch] = []
    /// The host's last absolute cart (only lines above 0), or nil before the first cart.
    public package(set) var hostCart: [ExactID: Int]?
    /// The highest outbox seq the host has acknowledged (its `syncedThrough`, checked against
    /// the outbox); nil for a host that never wrote one.
    public package(set) var hostSyncedThrough: UInt64?
    /// The highest seq a cart echoed (a host without `syncedThrough` applied it): `apply` starts
    /// after it, so a legacy host moving to `apply` never gets a batch twice.
    public package(set) var echoedThrough: UInt64?
    /// The highest seq a cart ever echoed, which may stand above a batch still pending (a host
    /// that applied a later batch before an earlier one): `echoedThrough` reaches it once the
    /// batches below it are settled.
    public package(set) var echoedAhead: UInt64?
    /// The last `syncedThrough` the host wrote, as written (a repeated claim is not reported again).
    public package(set) var hostClaim: UInt64?
    /// Read from older states only: acknowledgements are checked by causality now, never capped.
    public package(set) var acknowledgementCap: UInt64?
    /// The Mealz-related lines of the last notification, or nil before the first one.
    public package(set) var lastNotified: [ExactID: Int]?
    /// The WebView's basis before the pending deltas: the lines of the last notification, emptied
    /// when a payment closes the basket; nil before the first notification (the share stands in).
    public package(set) var viewBase: [ExactID: Int]?
    /// The pending batches up to this seq are counted in `viewBase` already: the notification that
    /// opened the current basket listed what was on its way. Nil when the last notification was
    /// a cart's (the pending deltas all come on top of it).
    public package(set) var viewCountsThrough: UInt64?
    /// For an acknowledging host whose last carts acknowledged nothing new (a claim refused, or
    /// none): the last pending batch the host cart shows applied (the host applies in seq order,
    /// so every pending batch up to it). Nil when the last cart's acknowledgement stood.
    public package(set) var cartShowsThrough: UInt64?
    /// Pending batches up to this seq were paid: the cart a recorded payment took showed them
    /// applied (an acknowledging host whose claim was refused). They count in no basket, and
    /// settle into no share.
    public package(set) var paidThrough: UInt64?
    /// The `syncedThrough` of the last notification.
    public package(set) var lastNotifiedSyncedThrough: UInt64?
    /// The store set with `setSelectedStoreWithExternalId`.
    public package(set) var storeId: String?
    /// The mode; payments are recorded only in retailer mode.
    public package(set) var mode: SyncMode = .standalone
    /// Order ids of recorded `handlePayment` calls → their payment seq.
    public package(set) var recordedOrders: [ExactID: UInt64] = [:]
    /// Transfer ids of `basketTransfer` events already landed.
    public package(set) var landedTransfers: Set<ExactID> = []
    /// What happened so far, for `status`.
    public package(set) var counters = SyncCounters()

    /// A fresh state for a new sync directory; `storeId` and `mode` as set before its first input
    /// (a tree's cart starts in the tree's default store).
    public init(syncId: String, storeId: String? = nil, mode: SyncMode = .standalone) {
        self.syncId = syncId
        self.storeId = storeId
        self.mode = mode
    }
}

/// Counts of what the library did, for `status` and the logs.
public struct SyncCounters: Codable, Hashable, Sendable {
    /// `updateBasket` batches written to the outbox.
    public var updateBaskets: UInt64 = 0
    /// `redirectToCart` records written to the outbox.
    public var redirects: UInt64 = 0
    /// Notifications sent.
    public var notifications: UInt64 = 0
    /// Batches settled by an acknowledgement or an echo.
    public var settled: UInt64 = 0
    /// Batches rolled back after their window.
    public var rolledBack: UInt64 = 0
    /// Rolled-back batches that the host applied late.
    public var lateEchoes: UInt64 = 0
    /// Delta batches ignored because no synchronizer was registered.
    public var ignored: UInt64 = 0
    /// Payment records with status `recorded`.
    public var paymentsRecorded: UInt64 = 0
    /// Payment records with status `skipped`.
    public var paymentsSkipped: UInt64 = 0
    /// `handlePayment` calls for an order already recorded.
    public var duplicatePayments: UInt64 = 0
    /// `basketTransfer` events whose transfer had already landed.
    public var duplicateTransfers: UInt64 = 0
    /// Rolled-back batches settled by a late acknowledgement.
    public var lateAcknowledgements: UInt64 = 0
    /// Acknowledgements of records that did not exist when the cart was written (beyond the
    /// outbox, or beyond what it held then): reported, not counted as acknowledged.
    public var acknowledgementsBeyondOutbox: UInt64 = 0
    /// Acknowledgements below the highest one (nothing un-settled).
    public var acknowledgementsWentBack: UInt64 = 0
    /// `basketState` events based on a basket other than the current one: ignored.
    public var staleStates: UInt64 = 0

    /// All counters at zero.
    public init() {}

    private enum CodingKeys: String, CodingKey {
        case updateBaskets, redirects, notifications, settled, rolledBack, lateEchoes, ignored
        case paymentsRecorded, paymentsSkipped, duplicatePayments, duplicateTransfers
        case lateAcknowledgements, acknowledgementsBeyondOutbox, acknowledgementsWentBack, staleStates
    }

    /// Decodes the counters; one a state written by an older version lacks starts at 0.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        func count(_ key: CodingKeys) throws -> UInt64 { try container.decodeIfPresent(UInt64.self, forKey: key) ?? 0 }
        updateBaskets = try count(.updateBaskets)
        redirects = try count(.redirects)
        notifications = try count(.notifications)
        settled = try count(.settled)
        rolledBack = try count(.rolledBack)
        lateEchoes = try count(.lateEchoes)
        ignored = try count(.ignored)
        paymentsRecorded = try count(.paymentsRecorded)
        paymentsSkipped = try count(.paymentsSkipped)
        duplicatePayments = try count(.duplicatePayments)
        duplicateTransfers = try count(.duplicateTransfers)
        lateAcknowledgements = try count(.lateAcknowledgements)
        acknowledgementsBeyondOutbox = try count(.acknowledgementsBeyondOutbox)
        acknowledgementsWentBack = try count(.acknowledgementsWentBack)
        staleStates = try count(.staleStates)
    }
}

/// An `updateBasket` batch sent to the host and not yet settled.
public struct PendingBatch: Codable, Hashable, Sendable {
    /// The batch's outbox seq.
    public var seq: UInt64
    /// The signed deltas.
    public var products: [RetailerProduct]
    /// When the batch was sent.
    public var at: Date
    /// When the batch is rolled back if the host has not echoed it; nil for a host that
    /// acknowledges with `syncedThrough` (it waits for the acknowledgement, however long).
    public var deadline: Date?

    /// Creates a pending batch.
    public init(seq: UInt64, products: [RetailerProduct], at: Date, deadline: Date?) {
        self.seq = seq
        self.products = products
        self.at = at
        self.deadline = deadline
    }
}

/// Deltas that Mealz pushed while no `RetailerBasketSynchronizer` was registered.
public struct IgnoredBatch: Codable, Hashable, Sendable {
    /// The id of the Mealz event, if any.
    public var source: String?
    /// The deltas that were not delivered.
    public var products: [RetailerProduct]

    /// Creates an ignored batch.
    public init(source: String?, products: [RetailerProduct]) {
        self.source = source
        self.products = products
    }
}

/// Whether the host runs Mealz in retailer mode, where payments are recorded.
public enum SyncMode: String, Codable, Hashable, Sendable {
    /// Retailer mode: payments are recorded once a store is set.
    case retailer
    /// Any other mode: payments are not recorded.
    case standalone
}
