import BasketSync
import BasketSyncWire

/// Recovery after a database loss (`init --adopt`, and a tree's new cart): what the files hold is
/// read back whole-record by whole-record, taken into the new database's rows, and handed to the
/// library (``SyncStateMachine/recover(from:)``), which decides the state.
enum Recovery {
    /// The records the JSON Lines files of `directory` hold, by file (each read whole), with
    /// those of their rotated parts (`outbox.jsonl.1`…): the oldest part first, one line per seq.
    static func recordsInFiles(_ directory: String) throws(AgentError) -> [Projection: [(seq: UInt64, line: [UInt8])]] {
        var found: [Projection: [(seq: UInt64, line: [UInt8])]] = [:]
        for projection in Projection.allCases {
            let path = "\(directory)/\(projection.fileName)"
            var bySeq: [UInt64: [UInt8]] = [:]
            for part in JSONLinesFile.rotatedParts(of: path).reversed() + [path] {
                // A file with a hole is none of basket-sync's: refused before it is read.
                if let fd = try? Posix.open(part, [.readOnly]) {
                    defer { Posix.close(fd) }
                    if let info = try? Posix.fileInfo(fd, path: part), Posix.hasHole(fd, size: info.size) { throw .system(JSONLinesFile.sparse(part)) }
                    // Nor is a file of another account's: its lines are not records to adopt.
                    if let info = try? Posix.fileInfo(fd, path: part), Trust.foreignOutput(info) != nil { continue }
                }
                guard let bytes = try Posix.readFile(part, limit: Int.max) else { continue }
                // Whole records only: a torn last line (no newline: a crash) and a host's own line
                // that merely starts like one are not records, as the catch-up reads them.
                let complete = bytes.last == 0x0A ? bytes[...] : bytes[..<(bytes.lastIndex(of: 0x0A).map { $0 + 1 } ?? 0)]
                for (index, line) in complete.split(separator: 0x0A, omittingEmptySubsequences: false).enumerated() {
                    // Numbered past any seq basket-sync gives: no record of its own — said, so
                    // that the records after it are not numbered after a number no reader keeps.
                    if RecordFormat.isNumberedPastLargest(line) {
                        throw .badData(path: part, line: index + 1, column: 8, reason: "a record numbered past \(SyncState.largestSeq), the largest seq basket-sync gives: none of its records; move the line (or the file) aside, then adopt again")
                    }
                    let seq = RecordFormat.seq(ofLine: line)
                    let record = Array(line) + [0x0A]
                    if seq > 0, projection.isRecord(record) { bySeq[seq] = record }
                }
            }
            if !bySeq.isEmpty { found[projection] = bySeq.sorted { $0.key < $1.key }.map { ($0.key, $0.value) } }
        }
        return found
    }

    /// A record of this directory the live outbox ends with, cut short by a crash (no newline):
    /// its seq (the one after the last whole record), the event that made it when the cut line
    /// still names it, and where the whole lines end.
    struct TornRecord: Equatable {
        var seq: UInt64
        var source: String?
        var wholeSize: Int
        /// The host's claim reaches it: it read the record whole before the crash.
        var heldByTheHost = false
    }

    /// The torn record the live outbox of `directory` ends with, if any: an unfinished last line
    /// that starts as a record of this directory numbered after the whole ones would
    /// (`{"seq":N,"id":"SYNCID-N"`, as far as it goes: the record due next after `found`'s last,
    /// or — no whole record left, the host having moved the file away — any N, its sync id 16
    /// hex digits). Another program's unfinished line is none.
    static func tornRecord(directory: String, found: [Projection: [(seq: UInt64, line: [UInt8])]]) -> TornRecord? {
        let last = found[.outbox]?.last
        let lastRecord = last.flatMap { try? RecordFormat.outboxRecord($0.line) }
        // The line's start only (its seq, id and source lie there), from a file of this account's:
        // another's is none of its records, as recordsInFiles reads them.
        guard let tail = JSONLinesFile(path: "\(directory)/\(Projection.outbox.fileName)").unfinishedLine(limit: 4096),
              Trust.foreignOutput(tail.info) == nil else { return nil }
        let wholeSize = Int(tail.completeSize)
        let unfinished = tail.start
        // A few bytes tell nothing.
        guard unfinished.count >= 8 else { return nil }
        let head = Array("{\"seq\":".utf8)
        guard unfinished.starts(with: head) else { return nil }
        let digits = unfinished[head.count...].prefix { (0x30...0x39).contains($0) }
        let seq: UInt64
        if let lastSeq = last?.seq {
            seq = lastSeq + 1
        } else {
            // The number as far as the line goes (cut within it, the digits it has).
            guard let number = UInt64(String(decoding: digits, as: UTF8.self)), number > 0 else { return nil }
            seq = number
        }
        var expected = Array("{\"seq\":\(seq),\"id\":\"".utf8)
        if let id = lastRecord?.id, let dash = id.lastIndex(of: "-") {
            expected += Array("\(id[..<dash])-\(seq)\"".utf8)
        } else {
            // No whole record to say the sync id: 16 hex digits, as basket-sync makes them.
            let hex = unfinished.dropFirst(expected.count).prefix(16)
            guard hex.allSatisfy({ (0x30...0x39).contains($0) || (0x61...0x66).contains($0) }) else { return nil }
            expected += Array(hex) + (hex.count == 16 ? Array("-\(seq)\"".utf8) : [])
        }
        guard unfinished.starts(with: expected.prefix(unfinished.count)) else { return nil }
        var source: String?
        let key = Array(",\"source\":\"".utf8)
        if let start = (0...max(0, unfinished.count - key.count)).first(where: { unfinished[$0...].starts(with: key) }) {
            let rest = unfinished[(start + key.count)...]
            if let close = rest.firstIndex(of: UInt8(ascii: "\"")), !rest[..<close].contains(UInt8(ascii: "\\")) {
                source = String(decoding: rest[..<close], as: UTF8.self)
            }
        }
        return TornRecord(seq: seq, source: source, wholeSize: wholeSize)
    }

    /// Cuts the torn record the outbox ends with (``tornRecord(directory:found:)``), once the
    /// database that adopted the records before it is committed: the file holds whole lines, and
    /// the next record starts one of its own.
    static func cut(_ torn: TornRecord?, directory: String) throws(AgentError) {
        guard let torn else { return }
        // A tree's cart through its folder opened without following a link, as its files are.
        let (reached, folder) = try CartFolder.reach(directory)
        defer { withExtendedLifetime(folder) {} }
        let path = "\(reached)/\(Projection.outbox.fileName)"
        do {
            let fd = try Posix.open(path, [.writeOnly])
            defer { Posix.close(fd) }
            try Posix.truncate(fd, to: Int64(torn.wholeSize), path: path)
        } catch {
            throw .system(error)
        }
    }

    /// Takes the files' records into a new database's cart (inside the caller's transaction):
    /// every seq goes on after them, a recorded order stays recorded, and an event taken before
    /// stays taken — its id from an outbox record's `source` or from its file in `inbox/cur/`, a
    /// transfer that landed from its record's `transferId` — so a redelivery is not done again.
    @discardableResult
    static func adoptRecords(_ found: [Projection: [(seq: UInt64, line: [UInt8])]], into store: Store, directory: String) throws(AgentError) -> TornRecord? {
        let now = Date()
        // A last record torn by a crash is lost with the database: cut once the new database is
        // committed (``cut(_:directory:)``; a failed adoption leaves it to be found again), its
        // number the next record's. The event it names is not taken, so that a redelivery is
        // done — unless the host shows it read that record whole before the crash (its cart's
        // claim, the last notification's, reaching it): the host holds it, the event stays taken.
        let configuration = (try? AgentConfiguration.load(directory: directory)) ?? AgentConfiguration()
        let notifiedClaim = (found[.notifications]?.last).flatMap { try? RecordFormat.notification($0.line).syncedThrough } ?? 0
        var torn = tornRecord(directory: directory, found: found)
        if let seq = torn?.seq, max(CartReader.claim(in: directory, configuration: configuration) ?? 0, notifiedClaim) >= seq { torn?.source = nil; torn?.heldByTheHost = true }
        for (projection, records) in found {
            for record in records { try store.adopt(projection, seq: record.seq, line: record.line) }
            // The files were given them all, rotated parts included: none is appended again.
            try store.adoptGiven(projection, seq: records.map(\.seq).max()!)
        }
        let outbox = (found[.outbox] ?? []).compactMap { try? RecordFormat.outboxRecord($0.line) }
        let taken = try learnTakenEvents(directory: directory, into: store, except: torn?.source.map { [$0] } ?? [])
        // The cart on disk, as the engine identifies it (CartReader.identity: stat, following).
        let cart = Posix.info("\(directory)/\(configuration.cart)", follow: true)
        // A torn record the host holds existed when its cart was written: the cart claims it.
        let writtenThrough = cart.map { max(cartWrittenThrough(modified: $0.modified, outbox: outbox), torn?.heldByTheHost == true ? torn!.seq : 0) }
        var recovered = RecoveredRecords(
            outbox: outbox,
            notifications: (found[.notifications] ?? []).compactMap { try? RecordFormat.notification($0.line) },
            payments: (found[.payments] ?? []).compactMap { try? RecordFormat.payment($0.line) },
            cartClaim: CartReader.claim(in: directory, configuration: configuration),
            cartWrittenThrough: writtenThrough,
            eventsSinceCart: outbox.isEmpty ? recordsAfterClaim(directory: directory, configuration: configuration, taken: taken) : 0,
            cartLines: cartLines(directory: directory, configuration: configuration),
            cartModified: cart.map { Date(timeIntervalSince1970: Double($0.modified) / 1e9) })
        // A torn record the host holds keeps its number: the next record is the one after it.
        if torn?.heldByTheHost == true { recovered.heldAfterOutbox = 1 }
        // No whole record left: the torn one was the newest, and the records before it are all
        // there were — its number is the next one's, unless the host holds it.
        if outbox.isEmpty, let torn {
            let before = torn.heldByTheHost ? torn.seq : torn.seq - 1
            recovered.eventsSinceCart = before > recovered.hostClaim ? before - recovered.hostClaim : 0
        }
        // The cart on disk was written before the records after that: remembered as the cart at
        // those records, so that taking it later acknowledges none of them (rule 4).
        if let cart, let through = writtenThrough, let last = outbox.last?.seq, through < last {
            try store.setCartAtBatch(identity: cart.identity, seq: through + 1)
        }
        for record in recovered.outbox {
            if let source = record.source {
                try store.recordInbox(id: source, file: "", outcome: "adopted: outbox #\(record.seq)", at: now, unlessKnown: true)
            }
        }
        // A recorded order's completion may have run (the database that knew is lost): never
        // run again (docs/spec.md §4 rule 7).
        for payment in recovered.payments where payment.type == .handlePayment {
            if let order = payment.orderId { try store.recordCompletion(orderId: order, payment: payment.seq, at: now) }
        }
        // The state itself is the library's: recovery is one of its inputs.
        // Its pending windows as the directory sets them: the history is played with them.
        var machine = SyncStateMachine(state: try store.loadState(), configuration: configuration.syncConfiguration)
        _ = machine.recover(from: recovered)
        try store.saveState(machine.state)
        return torn
    }

    /// The last outbox record that existed when the cart was last written (`modified`, in ns),
    /// by the records' times (a chmod moves no content). A record made in the same millisecond
    /// counts as existing: an honest host's cart written right after the record is not refused.
    static func cartWrittenThrough(modified: Int64, outbox: [OutboxRecord]) -> UInt64 {
        let writtenMs = modified / 1_000_000
        // The records before the first one a file holds (rotated away) have no time to judge by:
        // never taken as made after the cart.
        let firstHeld = (outbox.first?.seq ?? 1) - 1
        return max(firstHeld, outbox.last { Int64(($0.at.timeIntervalSince1970 * 1000).rounded(.down)) <= writtenMs }?.seq ?? 0)
    }

    /// The `syncedThrough` of the host's cart as it stands (nil when it has none, or no cart can
    /// be read): a new database numbers its records after it (``RecoveredRecords/hostClaim``), and
    /// a cart that has one, 0 included, is an acknowledging host's.
    static func cartClaim(directory: String, configuration: AgentConfiguration? = nil) -> UInt64? {
        let configuration = configuration ?? (try? AgentConfiguration.load(directory: directory)) ?? AgentConfiguration()
        return CartReader.claim(in: directory, configuration: configuration)
    }

    /// Takes the ids of the events in `inbox/cur/` as taken (inside the caller's transaction): a
    /// new database (`init`, `init --adopt`, a tree's new cart) must not take them again when they
    /// are delivered again, whether or not they made a record (ignored, nothing to send); the
    /// transfers among them landed, so a redelivery under a new event id is not landed again.
    /// Returns how many events it found: each made at most one outbox record.
    @discardableResult
    static func learnTakenEvents(directory: String, into store: Store, configuration: AgentConfiguration? = nil, except lost: Set<String> = []) throws(AgentError) -> UInt64 {
        let now = Date()
        let events = takenEvents(directory: directory, configuration: configuration)
        for (name, event) in events where !lost.contains(event.id) {
            try store.recordInbox(id: event.id, file: name, outcome: "adopted from inbox/cur/", at: now, unlessKnown: true)
            try store.recordFiled(folder: "cur", name: name, at: now)
            if case let .basketTransfer(_, transferId) = event.event, try !store.transferLanded(transferId) {
                try store.recordTransfer(transferId, at: Timestamp.text(now))
            }
        }
        return UInt64(events.count)
    }

    /// The events in `inbox/cur/`, by their file names: regular files with one name only, read
    /// through the folder opened without following a link (a file unreadable as an event, or a
    /// hard link to a file elsewhere, is left alone unread; a cur/ that is a link is not read).
    static func takenEvents(directory: String, configuration: AgentConfiguration? = nil) -> [(name: String, event: InboxEvent)] {
        // No cur/ (a new cart): nothing was taken.
        guard Posix.info("\(directory)/inbox/cur", follow: false) != nil else { return [] }
        let limits = (configuration ?? (try? AgentConfiguration.load(directory: directory)) ?? AgentConfiguration()).limits
        guard let inbox = try? Inbox(directory: "\(directory)/inbox").pinned() else { return [] }
        // Its descriptors live as long as `inbox`: the folder is reached through them.
        return withExtendedLifetime(inbox) {
            let cur = inbox.folder("cur")
            return Posix.listDirectory(cur).filter { !$0.hasPrefix(".") }.compactMap { name in
                guard let (bytes, info) = try? Posix.readFileAndInfo("\(cur)/\(name)", limit: limits.maxFileBytes), info.links == 1,
                      let event = try? EventFormat.decode(bytes, limits: limits) else { return nil }
                return (name, event)
            }
        }
    }

    /// With no outbox record left in any file: how many records may have been made after the
    /// cart's claim — the events taken since the cart was last written, and at least as many as
    /// the events `inbox/cur/` holds beyond the claim (`taken`; each made at most one record, and
    /// the cart may have been written after records it had not applied). Records go on after
    /// claim + this, so that no number a record had is used again.
    static func recordsAfterClaim(directory: String, configuration: AgentConfiguration, taken: UInt64) -> UInt64 {
        let claim = CartReader.claim(in: directory, configuration: configuration) ?? 0
        return max(eventsSinceCart(directory: directory, configuration: configuration), taken > claim ? taken - claim : 0)
    }

    /// The lines of the host's cart as it stands, read as the agent reads it; nil when there is
    /// none or it cannot be read.
    static func cartLines(directory: String, configuration: AgentConfiguration) -> [RetailerProduct]? {
        guard case let .new(bytes, _)? = try? CartReader().read("\(directory)/\(configuration.cart)", configuration: configuration),
              let cart = try? CartFormat.decode(bytes, keys: configuration.keys, limits: configuration.limits) else { return nil }
        return cart.products
    }

    /// The events in `inbox/cur/` filed after the cart's last write (by their files' times): each
    /// may have made a record the host had not applied when its cart was written.
    static func eventsSinceCart(directory: String, configuration: AgentConfiguration) -> UInt64 {
        guard let cart = Posix.info("\(directory)/\(configuration.cart)", follow: true) else { return 0 }
        let cur = "\(directory)/inbox/cur"
        return UInt64(Posix.countNames(in: cur) { name in
            guard !name.hasPrefix("."), let info = Posix.info("\(cur)/\(name)", follow: false), info.kind == .regular else { return false }
            return info.modified > cart.modified
        })
    }

    /// What `init` says of the records it adopted.
    static func adoptedLines(_ found: [Projection: [(seq: UInt64, line: [UInt8])]], directory: String, torn: TornRecord? = nil) -> [String] {
        let configuration = (try? AgentConfiguration.load(directory: directory)) ?? AgentConfiguration()
        var lost: [String] = []
        if let torn {
            let event: String
            if torn.heldByTheHost {
                event = "the host's claim shows it read that record before the crash: the event that made it stays taken, and records go on after it (a reader going by seq finds no line \(torn.seq))"
            } else if let source = torn.source {
                event = "the event that made it, \(JSONWriter.quoted(source)), is not taken: delivered again (under its id), it is done"
            } else {
                let named = Set((found[.outbox] ?? []).compactMap { try? RecordFormat.outboxRecord($0.line).source })
                let candidates = takenEvents(directory: directory).map(\.event.id).filter { !named.contains($0) }.sorted()
                event = candidates.isEmpty ? "the cut line names no event"
                    : "the cut line names no event; one of those inbox/cur/ holds that no whole record names made it (\(candidates.prefix(5).map { JSONWriter.quoted($0) }.joined(separator: ", "))\(candidates.count > 5 ? ", …" : "")): deliver it again under a new id if the host does not hold it"
            }
            lost.append("\(directory)/\(Projection.outbox.fileName): record \(torn.seq) was cut short by a crash and is lost with the database: cut from the file; \(event)")
        }
        if found[.outbox] == nil, let claim = cartClaim(directory: directory) {
            let taken = UInt64(takenEvents(directory: directory).count)
            var events = recordsAfterClaim(directory: directory, configuration: configuration, taken: taken)
            // The torn record's own event is said above (and its number is known).
            if let torn, !torn.heldByTheHost { events = torn.seq - 1 > claim ? torn.seq - 1 - claim : 0 }
            if events > 0 {
                lost.append("\(directory)/\(Projection.outbox.fileName): no record is left, and inbox/cur/ holds events that may have made records after the cart's claim \(claim) (\(events == 1 ? "record \(claim + 1)" : "records \(claim + 1)…\(claim + events)") at most), which the host had not applied: they are lost with the outbox (a rotated file basket-sync cannot read, such as a compressed one, may hold them) — deliver those events again under new ids if the host does not hold them; records go on after \(claim + events), so that no number a record had is used again")
            }
        }
        // A file removed (logrotate without `create`, a host's cleanup): what it told is gone.
        if found[.outbox] != nil, found[.notifications]?.first?.seq != 1, cartLines(directory: directory, configuration: configuration) != nil {
            lost.append("\(directory)/\(Projection.notifications.fileName): its first records are in no file: what the host's carts showed before is unknown — a host without syncedThrough is taken to have processed the records made before its cart's last write (never applied twice), Mealz's share before is counted as none, and notification seqs go on after the last one a file holds (a reader going by seq may see one again)")
        }
        if found[.payments]?.first?.seq ?? 1 != 1 || (found[.payments] == nil && (found[.notifications]?.compactMap { try? RecordFormat.notification($0.line).basket }.max() ?? 1) > 1) {
            lost.append("\(directory)/\(Projection.payments.fileName): records are in no file while the notifications show a basket closed: a retried order of those is not recognised, payment seqs may repeat, and a basket's close is read from its notification")
        }
        return lost + found.sorted(by: { $0.key.rawValue < $1.key.rawValue }).map { (projection, records) in
            // A torn record the host holds is the last record made: records go on after it.
            let held: UInt64 = projection == .outbox && torn?.heldByTheHost == true ? 1 : 0
            var line = "\(directory)/\(projection.fileName): adopted \(records.count) records, going on after \(records.map(\.seq).max()! + held)"
            if projection == .outbox, let first = records.first?.seq, first > 1 {
                let claim = cartClaim(directory: directory) ?? 0
                if claim < first - 1 {
                    line += "; records \(claim + 1)…\(first - 1) are in no file (rotated away) and the host had not processed them: they are lost, and the host goes on from \(first)"
                }
            }
            if projection == .outbox, let claim = cartClaim(directory: directory), claim > 0,
               let cart = Posix.info("\(directory)/\(((try? AgentConfiguration.load(directory: directory)) ?? AgentConfiguration()).cart)", follow: true) {
                let outbox = records.compactMap { try? RecordFormat.outboxRecord($0.line) }
                let through = max(cartWrittenThrough(modified: cart.modified, outbox: outbox), held > 0 ? torn!.seq : 0)
                let last = (records.map(\.seq).max() ?? 0) + held
                if claim > last {
                    line += "; the cart claims syncedThrough \(claim), beyond the files (they end at \(last)): it acknowledges nothing (a cart of another sync directory, or a counter run ahead); the records wait until a cart claims within them"
                } else if claim > through {
                    // Refused by the cart's time: said, since a clock behind or a copy keeping an
                    // old time refuses an honest claim the same way.
                    line += "; the cart claims syncedThrough \(claim) but was last modified before record \(through + 1) was made: it acknowledges only through \(through) (a cart written before those records). If the host did write it after them (a file server's clock behind, a copy that kept an old time), have the host write its cart again now: its next version acknowledges"
                }
            }
            guard projection == .payments else { return line }
            // What the files do not hold: the store and mode, and whether completions ran.
            let payments = records.compactMap { try? RecordFormat.payment($0.line) }
            if let last = payments.last(where: { $0.status == .recorded }) {
                line += "; the store and mode are not in the files (the last recorded payment was in store \(last.storeId.map { JSONWriter.quoted($0) } ?? "none"), retailer mode): set them again with basket-sync set-store"
            }
            if payments.contains(where: { $0.type == .handlePayment && $0.orderId != nil }) {
                line += "; the completions of the recorded orders are taken as finished (a retry never runs them again): whether each ran is not in the files"
            }
            return line
        }
    }
}
