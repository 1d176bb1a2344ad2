import BasketSync
import BasketSyncWire

extension SyncEngine {
    /// A whole pass over one cart cut in three, so that the passes of many carts share one
    /// transaction — one database commit and its fsync for all (`sync` on a tree's root): what is
    /// read before the transaction, what is decided inside it, what is written once it committed.
    /// The same steps as ``pass(_:inboxSeen:)``, in the same order (the inbox before the cart).
    struct GroupedPass {
        /// The inbox as pinned, held (five descriptors) only while events wait for their finish.
        fileprivate let inbox: Inbox?
        fileprivate let waiting: [String]
        fileprivate let read: InboxGroupRead
        fileprivate var summary = PassSummary()
        fileprivate var taken: InboxGroupTaken?
        fileprivate var cart: CartRead?
        /// What it holds in memory until its finish: its events, and at most its cart.
        var bytes: Int64 { Int64(read.bytes) }
    }

    /// Before the group's transaction: the files caught up, the next deadline read, the first
    /// group of waiting events read and checked.
    func prepareGroupedPass() throws(AgentError) -> GroupedPass {
        // A new cart's files, made empty here, are noted in the group's transaction rather than
        // in a commit each.
        emptyNotes = [:]
        inboxStuck = nil
        do {
            try publishAll(readingDeadline: true)
            if emptyNotes?.isEmpty ?? true { emptyNotes = nil }
            var summary = PassSummary()
            let (inbox, waiting) = try openInbox(seen: [], look: 0, into: &summary.inbox)
            let read = try readGroup(waiting.prefix(SyncEngine.inboxGroupSize), from: inbox, into: &summary.inbox)
            return GroupedPass(inbox: read.events.isEmpty ? nil : inbox, waiting: waiting, read: read, summary: summary)
        } catch {
            emptyNotes = nil  // its files are noted by the next catch-up, as for a new file
            throw error
        }
    }

    /// Inside the group's transaction (under the caller's savepoint: a cart that fails is undone
    /// alone): the events taken, then the cart read and run — unless more events wait than one
    /// group (or entries not placed yet), whose cart is read after all of them by
    /// ``finishGroupedPass(_:)``.
    func groupedPassInTransaction(_ pass: inout GroupedPass) throws(AgentError) {
        // Only where no note is yet: one written meanwhile by another process is newer. A note
        // of an empty file given nothing says what no note says (start after record 0), so one
        // lost with this transaction costs nothing.
        if let notes = emptyNotes {
            emptyNotes = nil
            for (projection, given) in notes { try store.noteGivenUnlessNoted(projection, given) }
        }
        if !pass.read.events.isEmpty { pass.taken = try takeGroupInTransaction(pass.read) }
        // Entries renamed in while `new/` was listed wait for a second look (the pass after),
        // and the cart for them.
        if pass.taken?.stopped == nil, pass.read.consumed == pass.waiting.count, pass.summary.inbox.held == 0 { pass.cart = try readCartInTransaction(askingFirst: true) }
    }

    /// Once the group's transaction committed: the appends and the acknowledgements, the rest of
    /// the pass (more events than one group, then the cart, when there were), the windows over,
    /// retention.
    func finishGroupedPass(_ pass: GroupedPass) throws(AgentError) -> PassSummary {
        var summary = pass.summary
        if let taken = pass.taken, let inbox = pass.inbox { try finishGroup(pass.read, taken, in: inbox, into: &summary.inbox) }
        // A group that ended early (see ``takeGroupInTransaction(_:)``): its events are done,
        // the pass fails as one taking them one by one would.
        if let stopped = pass.taken?.stopped { throw stopped }
        guard let cart = pass.cart else {
            // The events beyond the first group (or held for a second look), then the cart: a
            // pass of its own (which ends with its own entry stuck in new/, if any; this
            // group's is said after it).
            let stuck = inboxStuck
            let rest = try self.pass(.everything)
            summary.inbox.taken += rest.inbox.taken
            summary.inbox.duplicates += rest.inbox.duplicates
            summary.inbox.bad += rest.inbox.bad
            summary.cart = rest.cart
            inboxStuck = stuck
            try throwIfInboxStuck()
            return summary
        }
        summary.cart = try finishCart(cart)
        try finishPass()
        try throwIfInboxStuck()
        return summary
    }
}
