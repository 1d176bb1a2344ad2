import BasketSync
import BasketSyncWire

/// What one slice of retention removed.
public struct RetentionSlice: Equatable, Sendable {
    /// Records removed from the database, per projection.
    public var records: [String: Int] = [:]
    /// Inbox event ids, transfer ids and order ids (with their completions) forgotten.
    public var ids = 0
    /// Files removed from `inbox/cur/` and `inbox/bad/` (a `.error` beside counts with its entry).
    public var files = 0
    /// Temporaries a process killed while writing left beside the cart or in `inbox/bad/`.
    public var temporaries = 0
    /// Whether a limit was reached: more is due at the next wake-up.
    public var more = false

    /// Whether nothing was removed.
    public var isEmpty: Bool { records.values.allSatisfy { $0 == 0 } && ids == 0 && files == 0 && temporaries == 0 }
}

extension SyncEngine {
    /// The most rows (and files) of each kind one slice removes: the cost of a wake-up stays
    /// bounded however much history is due.
    static let retentionSliceLimit = 1000

    /// One bounded slice of retention (docs/spec.md §9), in one transaction, when `"retention"` is set:
    /// records older than the retention that the host acknowledged (outbox: through what it
    /// acknowledged or echoed, never a pending batch) and that their file was given, ids of
    /// events, transfers and orders, and the files of `inbox/cur/` and `inbox/bad/`. The last
    /// record of each projection always stays (the files' catch-up and `wait` compare with it).
    /// The freed pages go back to the file system (`auto_vacuum=INCREMENTAL`).
    @discardableResult
    public func retain(now: Date = Date()) throws(AgentError) -> RetentionSlice {
        var slice = RetentionSlice()
        guard let retention = configuration.retention else { return slice }
        let boot = Posix.bootSeconds()
        if let due = retentionDue, boot < due { return slice }
        let limit = Self.retentionSliceLimit
        let inbox: Inbox?
        do { inbox = try self.inbox.pinned() } catch { inbox = nil }  // files wait for a usable inbox
        try store.useIncrementalVacuum()
        var judgedAt = now
        slice = try store.withTransaction { () throws(AgentError) in
            var slice = RetentionSlice()
            judgedAt = try retentionNow(now)
            let cutoff = Timestamp.text(judgedAt.addingTimeInterval(-retention.seconds))
            // What of the outbox the host is done with is the library's rule.
            let outbox = try store.loadState().outboxRetention
            for projection in Projection.allCases {
                // Below what the file was given, and below the last record.
                let bound = min(try store.given(projection)?.seq ?? 0, try store.lastSeq(projection))
                let removed = try store.removeRecords(projection, below: bound, keeping: projection == .outbox ? outbox.unechoed : [], activeSince: cutoff, limit: limit) { seq, line in
                    guard let at = RecordFormat.at(ofLine: line), at < cutoff else { return false }
                    return projection != .outbox || outbox.mayRemove(seq)
                }
                slice.records[projection.rawValue] = removed
                if removed == limit { slice.more = true }
            }
            let ids = try store.forgetIds(olderThan: cutoff, limit: limit)
            slice.ids = ids.count
            if ids.more { slice.more = true }
            if let inbox {
                let files = try store.filedFiles(olderThan: cutoff, limit: limit)
                // Names from the database are never paths: one component in cur/ or bad/, or
                // nothing is removed (the row is forgotten all the same).
                for file in files where ["cur", "bad"].contains(file.folder) && Posix.isOneComponent(file.name) {
                    let path = "\(inbox.folder(file.folder))/\(file.name)"
                    let removed = Posix.remove(path)
                    if removed { slice.files += 1 }
                    // A directory set aside that is not empty stays, and its .error with it.
                    if file.folder == "bad", removed || Posix.info(path, follow: false) == nil { _ = Posix.remove(path + ".error") }
                }
                try store.forgetFiled(files)
                if files.count == limit { slice.more = true }
            }
            try store.vacuumFreePages()
            return slice
        }
        slice.temporaries = removeStaleTemporaries(inbox: inbox, now: judgedAt)
        // Nothing more due now: look again after a tenth of the retention (at most a minute), at
        // an ordinary wake-up — no timer is armed for it (on the boot clock: a step of the wall
        // clock back neither holds retention nor hurries it).
        retentionDue = slice.more ? nil : boot + min(retention.seconds / 10, 60)
        if !slice.isEmpty {
            let records = Projection.allCases.map { "\(slice.records[$0.rawValue] ?? 0) \($0.rawValue)" }.joined(separator: ", ")
            logger.log(.info, "retention: removed records older than \(SyncEngine.shownDays(retention.days)) (\(records)), \(slice.ids) ids, \(slice.files) inbox files\(slice.temporaries == 0 ? "" : ", \(slice.temporaries) temporaries a killed writer left")")
        }
        return slice
    }

    /// The temporaries a process killed while writing atomically left (an `apply` beside the
    /// cart, a pass setting an event aside in `inbox/bad/`), over an hour old: removed, looked
    /// for at most once an hour. Returns how many went.
    private func removeStaleTemporaries(inbox: Inbox?, now: Date) -> Int {
        let boot = Posix.bootSeconds()
        if let due = temporariesDue, boot < due { return 0 }
        temporariesDue = boot + Self.staleTemporaryAge
        // The cart's (apply writes it), and the `.error`s of bad/ (a pass writes them).
        let cartName = String(Posix.basename(of: configuration.cart).prefix(200))
        var removed = (try? Posix.withPinnedFolders(base: directory, relative: configuration.cart) { (cart) throws(AgentError) in
            Posix.removeStaleTemporaries(in: Posix.dirname(of: cart), of: { $0 == cartName }, olderThan: Self.staleTemporaryAge, now: now.timeIntervalSince1970)
        }) ?? 0
        if let inbox {
            removed += Posix.removeStaleTemporaries(in: inbox.folder("bad"), of: { $0.hasSuffix(".error") }, olderThan: Self.staleTemporaryAge, now: now.timeIntervalSince1970)
        }
        return removed
    }

    /// The time retention judges ages by (docs/spec.md §9): the wall clock, but never ahead of
    /// the time that passed on the boot clock (which nobody sets) since the least wall-less-boot
    /// offset seen on this boot — noted by every row retention ages as it is stamped, and here.
    /// Set forward, the wall clock would make what was taken a minute ago look days old (an event
    /// redelivered after its id was forgotten would be taken again); set back while something was
    /// stamped, it would age that by the step once set right. Inside the caller's transaction.
    func retentionNow(_ now: Date) throws(AgentError) -> Date {
        let (least, offset) = try store.noteRetentionClock(now)
        return now.addingTimeInterval(min(0, least - offset))
    }

    /// How old a temporary nobody renamed is before retention removes it.
    static let staleTemporaryAge: Double = 3600

    /// `30 days`, `0.5 days`.
    static func shownDays(_ days: Double) -> String {
        "\(AgentConfiguration.number(days)) day\(days == 1 ? "" : "s")"
    }
}
