import BasketSync
import BasketSyncWire

extension SyncEngine {
    /// What taking the inbox did.
    public struct InboxSummary: Equatable {
        /// Events taken for the first time.
        public var taken = 0
        /// Events whose id was already taken: acknowledged, nothing done again.
        public var duplicates = 0
        /// Malformed events moved to `inbox/bad/`.
        public var bad = 0
        /// Entries left waiting: the budget was spent, or SIGTERM came.
        public var left = 0
        /// Entries not placed yet (listed before their report, or renamed in while `new/` was
        /// listed), left for the next look.
        public var held = 0
    }

    /// Takes every event waiting in `inbox/new/`, in delivery order (`seen`: the names inotify
    /// reported, in its order; see ``Inbox/waiting(seen:)``). Each one is committed (dedupe by
    /// id, outbox, state) and published before it is moved to `inbox/cur/`: a file leaves `new/`
    /// only once its records are durable.
    ///
    /// A listing made while renames land may miss an entry renamed in during it and show a later
    /// one (docs/spec.md §4 rule 6). So an entry is taken at the look that places it: `reported`
    /// (inotify watches `new/` and no report was lost), at its report; otherwise, when it was
    /// renamed in before the listing began (its change time). An entry not placed yet is held
    /// for the next look — the agent's next wake-up (`wakeup` counts them), which reads every
    /// report queued meanwhile — and taken then, placed or not. Without `wakeup` (a one-shot
    /// command), a second look follows at once when the first held any.
    @discardableResult
    public func takeInbox(seen: [String] = [], wakeup: Int? = nil, reported: Bool = false) throws(AgentError) -> InboxSummary {
        if let wakeup { return try takeInboxOnce(seen: seen, look: wakeup, reported: reported) }
        defer { inboxUnreported = [:] }
        let first = try takeInboxOnce(seen: seen, look: 0, reported: false)
        guard first.held > 0, first.left == 0 else { return first }
        var summary = try takeInboxOnce(seen: [], look: 1, reported: false)
        summary.taken += first.taken
        summary.duplicates += first.duplicates
        summary.bad += first.bad
        return summary
    }

    /// One look at `new/` (``takeInbox(seen:wakeup:reported:)``).
    private func takeInboxOnce(seen: [String], look: Int, reported: Bool) throws(AgentError) -> InboxSummary {
        var summary = InboxSummary()
        let (inbox, waiting) = try openInbox(seen: seen, look: look, reported: reported, into: &summary)
        // Group commit: the events of a group share one transaction (one database fsync) and one
        // append per JSON Lines file, all before any of them is acknowledged.
        var start = 0
        while start < waiting.count {
            // Between groups: SIGTERM stops the pass (each group is whole), a spent budget leaves
            // the rest for the next turn.
            if SignalPipe.stopRequested || inboxBudget.map({ start >= $0 }) == true {
                inboxBacklog = waiting[start...]
                summary.left = waiting.count - start
                break
            }
            let group = waiting[start..<min(start + SyncEngine.inboxGroupSize, waiting.count)]
            start += try takeGroup(group, from: inbox, into: &summary)
        }
        return summary
    }

    /// The inbox with its folders opened once for the pass (never followed if swapped for a link
    /// meanwhile), and the entries waiting in `new/`, in delivery order (an earlier pass's backlog
    /// first); a name no String can hold is set aside first. With `look`, an entry not placed yet
    /// is held (``takeInbox(seen:wakeup:reported:)``); without, every entry listed is taken.
    func openInbox(seen: [String], look: Int? = nil, reported: Bool = false, into summary: inout InboxSummary) throws(AgentError) -> (Inbox, [String]) {
        let inbox: Inbox
        do { inbox = try self.inbox.pinned() } catch { throw .system(error) }
        // `new/` read once: a listing that fails is this pass's error, unless an earlier pass's
        // listing is still being taken. What was renamed in before it began is all in it.
        let fromBacklog = !inboxBacklog.isEmpty && inboxBudget != nil
        let listingBegan = Posix.coarseWallClockNanoseconds()
        var listed: (names: [String], unnamable: [[UInt8]]) = ([], [])
        do { listed = try inbox.listNew() } catch {
            if !fromBacklog { throw .system(inbox.shown(error)) }
        }
        // A name no String can hold could be neither read nor moved by name: set aside first.
        for entry in inbox.setAside(listed.unnamable) {
            summary.bad += 1
            reportError(.badData(path: entry.shown, line: 1, column: 1, reason: "the name is not UTF-8; set aside as inbox/bad/\(entry.moved): deliver the event again under a UTF-8 name"))
            _ = try? store.withTransaction { () throws(AgentError) in try store.recordFiled(folder: "bad", name: entry.moved, at: Date()) }
        }
        // An earlier pass's backlog (its budget spent) was listed and ordered then: it goes first.
        let backlog = fromBacklog ? Set(inboxBacklog.map { ExactID($0) }) : []
        var names = (fromBacklog ? listed.names.filter { !backlog.contains(ExactID($0)) } : listed.names).filter { !$0.hasPrefix(".") }
        var placed: (names: [String], unordered: [(String, String)])
        if let look {
            // Held at an earlier look and not placed since: taken now, placed or not.
            var heldOver: [(name: String, changed: Int64)] = []
            var held: [ExactID: Int] = [:]
            var known: [(name: String, changed: Int64)] = []
            let seenNames = Set(seen.map { ExactID($0) })
            for name in names {
                let id = ExactID(name)
                if reported, seenNames.contains(id) { continue }
                if let since = inboxUnreported[id], since < look {
                    heldOver.append((name, inbox.changed(name)))
                    continue
                }
                // Without reports, an entry renamed in before the listing began is placed by its
                // change time (the listing holds every such one).
                if !reported, case let changed = inbox.changed(name), changed < listingBegan {
                    known.append((name, changed))
                    continue
                }
                held[id] = inboxUnreported[id] ?? look
            }
            inboxUnreported = held
            summary.held = held.count
            if reported {
                // Held over: renamed in before what is reported now (its report was read by a
                // pass that lost its backlog, or inotify does not report such a delivery).
                let before = Inbox.deliveryOrder(heldOver)
                names = names.filter { seenNames.contains(ExactID($0)) }
                let since = inbox.waitingInOrder(seen: seen, listed: names)
                placed = (before.names + since.names, before.unordered + since.unordered)
            } else {
                placed = Inbox.deliveryOrder(heldOver + known)
            }
        } else {
            inboxUnreported = [:]
            placed = inbox.waitingInOrder(seen: seen, listed: names)
        }
        let waiting = (fromBacklog ? Array(inboxBacklog) : []) + placed.names
        let unordered = placed.unordered
        inboxBacklog = []
        // Two deliveries of one clock tick, one without a Maildir name: taken in the order said.
        if let (first, second) = unordered.first {
            let message = "order unknown between \(inbox.shown(first)) and \(inbox.shown(second)) (delivered in the same clock tick, a name without a delivery time): \(inbox.shown(first)) taken first; deliver with Maildir names (SECONDS.M<usec>P<pid>Q<n>.host, or basket-sync push)"
            logger.log(.warning, unordered.count > 1 ? message + "; \(unordered.count - 1) more such pairs" : message)
            _ = try? store.withTransaction { () throws(AgentError) in try store.setNote(.orderUnknown, "\(Timestamp.text(Date()))\t\(message)") }
        }
        return (inbox, waiting)
    }

    /// The most events one transaction takes: a group holds the database's write lock for its
    /// length (other processes wait for it), and is one fsync of the database and of each file.
    static let inboxGroupSize = 256

    /// Takes a group of waiting entries in delivery order: read and checked first (a bad one set
    /// aside), then every event in one transaction — each under a savepoint, so that one the
    /// library refuses is set aside alone — then the appends, then the acknowledgements.
    ///
    /// A group also ends once the events read reach `maxFileBytes` together: its decoded events are
    /// held until the commit. Returns how many of `names` it went through.
    private func takeGroup(_ names: ArraySlice<String>, from inbox: Inbox, into summary: inout InboxSummary) throws(AgentError) -> Int {
        let read = try readGroup(names, from: inbox, into: &summary)
        guard !read.events.isEmpty else { return read.consumed }
        let taken = try store.withTransaction { () throws(AgentError) in try takeGroupInTransaction(read) }
        try finishGroup(read, taken, in: inbox, into: &summary)
        if let stopped = taken.stopped { throw stopped }
        return read.consumed
    }

    /// A group of inbox entries read and checked, waiting for its transaction.
    struct InboxGroupRead {
        var events: [(name: String, path: String, event: InboxEvent)] = []
        /// How many of the names given it went through (read, set aside, or gone).
        var consumed = 0
        /// The bytes of the events read.
        var bytes = 0
    }

    /// What the transaction did with each event of a group, for ``finishGroup(_:_:in:into:)``.
    struct InboxGroupTaken {
        enum Outcome { case taken(duplicate: Bool, sameFile: Bool), refused(AgentError) }
        var outcomes: [Outcome] = []
        var summaries: [StepSummary] = []
        /// Why the group ended before its last event (see ``takeGroupInTransaction(_:)``): thrown
        /// once the events before it are finished; nil when it went through.
        var stopped: AgentError?
    }

    /// Reads and checks the entries of a group, in order, before its transaction: a bad one is
    /// set aside (and counted); the group ends early once the events read reach `maxFileBytes`.
    func readGroup(_ names: ArraySlice<String>, from inbox: Inbox, into summary: inout InboxSummary) throws(AgentError) -> InboxGroupRead {
        var read = InboxGroupRead()
        var bytesRead = 0
        for name in names {
            if bytesRead >= configuration.limits.maxFileBytes { break }
            read.consumed += 1
            let path = inbox.shown(name)
            let bytes: [UInt8]
            do {
                guard let found = try inbox.read(name, limit: configuration.limits.maxFileBytes) else { continue }
                bytes = found
            } catch {
                let error = inbox.shown(error)
                // Too large, not a regular file (a link, a FIFO, a directory), or not readable by
                // basket-sync: set aside unread, never in the way of the events behind.
                var unreadable = false
                if case .tooLarge = error { unreadable = true }
                if case let .system(failure) = error, failure.isNotRegular || failure.isPermissionDenied { unreadable = true }
                if case .refused = error { unreadable = true }
                guard unreadable else { throw error }
                if try quarantine(name, error, in: inbox) { summary.bad += 1 }
                continue
            }
            bytesRead += bytes.count
            read.bytes = bytesRead
            do { read.events.append((name, path, try decodeEvent(bytes, path: path))) } catch {
                if try quarantine(name, error, in: inbox) { summary.bad += 1 }
            }
        }
        return read
    }

    /// The events of a group taken inside the caller's transaction (the state saved once at its
    /// end), each under a savepoint: one the library refuses is undone alone; one the directory
    /// cannot number ends the group there (``InboxGroupTaken/stopped``), as taking them one by
    /// one would end. Nothing is appended, logged or acknowledged yet.
    func takeGroupInTransaction(_ read: InboxGroupRead) throws(AgentError) -> InboxGroupTaken {
        try store.withStateSavedOnce { () throws(AgentError) in
            var taken = InboxGroupTaken()
            for entry in read.events {
                do throws(AgentError) {
                    let (duplicate, sameFile, step) = try store.withSavepoint { () throws(AgentError) in
                        try takeEvent(entry.event, name: entry.name, path: entry.path)
                    }
                    taken.outcomes.append(.taken(duplicate: duplicate, sameFile: sameFile))
                    taken.summaries.append(step)
                } catch {
                    if case .badData = error {
                        taken.outcomes.append(.refused(error))
                        continue
                    }
                    // An event the directory cannot take (its numbers have run out) ends the
                    // group there: those before it are taken, as one by one; it and those after
                    // it stay in new/. Any other failure (the database's) takes the group back.
                    guard case .refused = error, !taken.outcomes.isEmpty else { throw error }
                    taken.stopped = error
                    break
                }
            }
            return taken
        }
    }

    /// Once the group's transaction committed: the files get the records (a duplicate's were
    /// committed before), then each entry is acknowledged (moved to `cur/`) or set aside.
    func finishGroup(_ read: InboxGroupRead, _ taken: InboxGroupTaken, in inbox: Inbox, into summary: inout InboxSummary) throws(AgentError) {
        try finish(taken.summaries)
        if taken.outcomes.contains(where: { if case .taken(true, _) = $0 { true } else { false } }) { try publish(.outbox) }
        for (entry, outcome) in zip(read.events, taken.outcomes) {
            switch outcome {
            case let .refused(error):
                if try quarantine(entry.name, error, in: inbox) { summary.bad += 1 }
                continue
            case let .taken(duplicate, sameFile):
                if !duplicate {
                    summary.taken += 1
                } else if sameFile {
                    logger.log(.info, "\(entry.path): event \(entry.event.id) was taken or filed before from this very file (by another basket-sync process meanwhile, or by an earlier pass that could not finish it: its line waited for the writers' lock, or its move to cur/ failed); acknowledged again, not done again")
                } else {
                    summary.duplicates += 1
                    logger.log(.info, "\(entry.path): event \(entry.event.id) was already taken; acknowledged without doing it again")
                }
            }
            let (failure, renamed) = inbox.acknowledge(entry.name)
            if let failure {
                let error = AgentError.refused("\(entry.path): taken, but cannot be moved to cur/ (\(inbox.shown(failure))); it stays in inbox/new/ and is acknowledged again, not done again, once inbox/cur/ takes it: make inbox/cur/ a folder basket-sync can write")
                if inboxStuck == nil { inboxStuck = error }
            }
            if let renamed {
                // cur/ held that name already: kept under its own, and known to retention by it.
                logger.log(.info, "\(entry.path): cur/ holds that name already; moved there as \(renamed)")
                _ = try? store.withTransaction { () throws(AgentError) in try store.recordFiled(folder: "cur", name: renamed, at: Date()) }
            }
        }
    }

    /// Parses and validates an inbox event.
    func decodeEvent(_ bytes: [UInt8], path: String) throws(AgentError) -> InboxEvent {
        do { return try EventFormat.decode(bytes, limits: configuration.limits) } catch {
            throw error.badData(path: path, bytes: bytes)
        }
    }

    /// One event, inside the group's transaction: dedupe by id, the library's effects, the inbox
    /// row. `duplicate` when the id was taken before (nothing done again).
    private func takeEvent(_ event: InboxEvent, name: String, path: String) throws(AgentError) -> (duplicate: Bool, sameFile: Bool, step: StepSummary) {
        var duplicate = false
        var sameFile = false
        var transfer: String?
        if case let .basketTransfer(_, transferId) = event.event { transfer = transferId }
        let step = try stepInTransaction(transfer: transfer, { (machine, now) throws(AgentError) in
            if let takenFrom = try store.inboxFile(id: event.id) {
                duplicate = true
                // A redelivery (another file with the same id) is counted for status: cur/ holds
                // one file per delivery, the inbox table one row per id. This very file taken by
                // another process meanwhile (the agent and a sync racing) is not a redelivery, nor
                // one another process filed first (it counted and reported it): counted once.
                let filedMeanwhile = try store.isFiled(folder: "cur", name: name)
                if takenFrom == name || filedMeanwhile {
                    // This very file, taken or filed by another process meanwhile: counted there.
                    sameFile = true
                } else {
                    try store.setNote(.inboxDuplicates, String((Int(try store.note(.inboxDuplicates) ?? "") ?? 0) + 1))
                }
                try store.recordFiled(folder: "cur", name: name, at: now)
                return []
            }
            do throws(SyncInputError) { return try machine.receive(event.event, source: event.id, at: now) } catch {
                throw AgentError.badData(path: path, line: 1, column: 1, reason: error.description)
            }
        }, record: { (summary) throws(AgentError) in
            guard !duplicate else { return }
            let outcome = summary.outbox.first.map { "outbox #\($0.seq)" }
                ?? (summary.ignored ? "ignored: no synchronizer" : summary.duplicateTransfer ? "duplicate transfer" : "nothing to send")
            try store.recordInbox(id: event.id, file: name, outcome: outcome, at: Date())
            try store.recordFiled(folder: "cur", name: name, at: Date())
        })
        return (duplicate, sameFile, step)
    }

    /// Sets a malformed or unreadable event aside in `inbox/bad/` and reports why. False when
    /// another process took it meanwhile.
    private func quarantine(_ name: String, _ error: AgentError, in inbox: Inbox) throws(AgentError) -> Bool {
        let why = error
        let moved: String?
        do { moved = try inbox.quarantine(name, because: why) } catch {
            // Not even set aside (bad/ not writable, an entry that cannot be moved): skipped and
            // reported, never in the way of the entries behind it (docs/spec.md §7).
            let stuck = AgentError.refused("\(inbox.shown(name)): cannot be set aside in inbox/bad/ (\(inbox.shown(error))), so it stays in inbox/new/ and is tried again after the agent's back-off; the entries behind it go on. Why it is set aside: \(why.description)")
            if inboxStuck == nil { inboxStuck = stuck }
            return false
        }
        guard let moved else { return false }
        reportError(error)
        // Kept there until retention removes it (if it is set).
        _ = try? store.withTransaction { () throws(AgentError) in try store.recordFiled(folder: "bad", name: moved, at: Date()) }
        return true
    }
}
