import BasketSync
import BasketSyncWire

extension SyncEngine {
    /// The parts of a pass, taken in one fixed order.
    public struct PassScope: OptionSet, Sendable {
        public let rawValue: Int

        /// Creates a scope from its bits.
        public init(rawValue: Int) { self.rawValue = rawValue }

        /// Catch the JSON Lines files up and read the next deadline again: another process committed.
        public static let publish = PassScope(rawValue: 1)
        /// Take the events waiting in `inbox/new/`.
        public static let inbox = PassScope(rawValue: 2)
        /// Take the cart when it changed.
        public static let cart = PassScope(rawValue: 4)
        /// Roll back the batches whose window is over.
        public static let expire = PassScope(rawValue: 8)
        /// Everything: at start, after a failure, for `sync`, after an inotify overflow.
        public static let everything: PassScope = [.publish, .inbox, .cart, .expire]
    }

    /// What a pass did.
    public struct PassSummary: Equatable {
        /// What reading the cart gave; nil when the pass did not read it.
        public var cart: CartOutcome?
        /// What taking the inbox did.
        public var inbox = InboxSummary()
    }

    /// A slice of old history goes when retention is set (bounded, and looked for at most every
    /// tenth of the retention); failing, it never holds up the sync itself.
    func retainQuietly() {
        guard let retention = configuration.retention else { return }
        do { try retain() } catch {
            logger.log(.warning, "retention: \(error.description); tried again in a minute")
            retentionDue = Posix.bootSeconds() + min(retention.seconds / 10, 60)
        }
    }

    /// One pass over the sync directory, shared by the agent's wake-ups and `sync`: recover the
    /// files, then the inbox before the cart (a cart may acknowledge the records its events
    /// make), then the expired windows. `inboxSeen` is the order inotify reported deliveries in;
    /// `inboxWakeup`, the agent's wake-up; `inboxReported`, whether inotify's reports place the
    /// inbox's entries (``takeInbox(seen:wakeup:reported:)``).
    @discardableResult
    public func pass(_ scope: PassScope = .everything, inboxSeen: [String] = [], inboxWakeup: Int? = nil, inboxReported: Bool = false) throws(AgentError) -> PassSummary {
        var summary = PassSummary()
        // What an earlier pass that failed on something else left here is not this pass's.
        inboxStuck = nil
        // A new engine (a tree's cart whose engine was dropped) reads its deadline first: a pass
        // that makes no step must not leave the cart without the deadline it has. Publishing
        // reads it again, as committed by any process, in its own read of the database.
        if scope.contains(.publish) {
            try publishAll(readingDeadline: true)
        } else {
            try learnDeadline()
        }
        if scope.contains(.inbox) { summary.inbox = try takeInbox(seen: inboxSeen, wakeup: inboxWakeup, reported: inboxReported) }
        // A whole pass mostly finds the cart as it last read it: asked first without the write lock.
        if scope.contains(.cart) { summary.cart = try takeCart(askingFirst: scope == .everything) }
        if scope == .everything {
            try finishPass()
        } else {
            if scope.contains(.expire) { try expireIfDue() }
            retainQuietly()
        }
        try throwIfInboxStuck()
        return summary
    }

    /// Ends the pass with the error of an inbox entry that could not leave `new/`, once the rest
    /// of the pass went through (see ``inboxStuck``).
    func throwIfInboxStuck() throws(AgentError) {
        guard let stuck = inboxStuck else { return }
        inboxStuck = nil
        throw stuck
    }

    /// The end of a whole pass: the windows over rolled back, retention, and the pass noted as
    /// gone through.
    func finishPass() throws(AgentError) {
        try expireIfDue()
        retainQuietly()
        // A whole pass went through: status says the errors before it are resolved. Written
        // only when an error came after the last one written (a commit costs an fsync) — asked
        // first without the write lock (most passes have nothing to write), then again under it.
        func errorSinceLastOK() throws(AgentError) -> Bool {
            guard let error = try store.reports(limit: 1, level: Logger.Level.error.rawValue).first else { return false }
            return error.at >= (try store.note(.passOK) ?? "")
        }
        guard try store.database.withReadTransaction(errorSinceLastOK) else { return }
        try store.withTransaction { () throws(AgentError) in
            if try errorSinceLastOK() { try store.setNote(.passOK, Timestamp.text(Date())) }
        }
    }

    /// Rolls back the windows over. Nothing to roll back before the next deadline (read again
    /// when another process committed) — unless the wall clock was stepped since the windows
    /// were set: the step that expires them moves them first.
    private func expireIfDue() throws(AgentError) {
        guard let deadline = nextDeadline else { return }
        if try deadline <= Date() ? true : clockStepped() { try expireWindows() }
    }
}
