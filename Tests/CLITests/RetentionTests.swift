import CSQLite
import Foundation
import Testing
import TestSupport

/// `"retention"` — history older than the retention goes, in bounded slices, and only
/// what the rules allow (docs/spec.md §9): never a pending batch, never a record the host has not
/// acknowledged, never the last record of a file; ids forgotten, so that one redelivered later is
/// taken again; `inbox/cur/` and `inbox/bad/` emptied of old files; the database shrinks back.
@Suite struct RetentionTests {
    /// Rows of a read-only query on the sync directory's database, each column as text.
    func query(_ playground: Playground, _ sql: String) -> [[String]] { playground.databaseRows(sql) }

    func seqs(_ playground: Playground, _ table: String) -> [Int] {
        query(playground, "SELECT seq FROM \(table) ORDER BY seq").compactMap { Int($0[0]) }
    }

    /// Waits until what was made before now is older than `retention` seconds (with a margin).
    func pastRetention(_ retention: Double, _ what: String = "older than the retention") async throws {
        let since = Date()
        try await eventually(what) { Date() > since.addingTimeInterval(retention + 0.2) }
    }

    func run(_ playground: Playground, _ arguments: [String]) throws -> Run {
        try basketSync(["-C", playground.path] + arguments)
    }

    /// What a record's age says at a retention pass that ran between `start` and `end`: gone for
    /// sure (older than the retention at the pass's start), kept for sure (younger at its end),
    /// or either (its age crossed the retention while the pass ran).
    enum Age { case old, young, either }
    func age(_ at: String, start: Date, end: Date, retention: Double) -> Age {
        guard let date = try? Date.ISO8601FormatStyle(includingFractionalSeconds: true).parse(at) else { return .either }
        if date < start.addingTimeInterval(-retention) { return .old }
        if date >= end.addingTimeInterval(-retention) { return .young }
        return .either
    }

    /// A seeded mix of events, transfers, carts that acknowledge part of the outbox, payments and
    /// malformed events, in two waves with the retention between them; then one `sync`, checked
    /// against the rules record by record.
    /// With `acknowledging` the host writes `syncedThrough`; without, its batches wait for an
    /// echo a short while and roll back: records neither pending nor acknowledged, which stay.
    @Test(arguments: [true, false])
    func retentionRemovesExactlyWhatTheRulesAllow(acknowledging: Bool) async throws {
        let seed = Knobs.seed
        var rng = SplitMix64(seed: seed)
        let context = "seed \(seed) (replay: BASKET_SYNC_SEED=\(seed))"
        let retention = 2.0
        let playground = try Playground()
        #expect(try run(playground, ["init"]).status == 0)
        try playground.write("basket-sync.json", "{\"retention\": {\"days\": \(retention / 86_400)}, \"pendingTimeoutSeconds\": 0.2}")
        #expect(try run(playground, ["set-store", "store-1", "--mode", "retailer"]).status == 0)
        try playground.writeAtomically("cart.json", cartJSON([("sku-1", 1)]))

        var events: [String] = []
        var transfers: [String] = []
        var orders: [String] = []
        var acknowledged = 0
        var counter = 0
        // When each event, transfer and order was made (before it was): one made after a pass's
        // start less the retention is young at that pass, however slow the machine was.
        var madeAt: [String: Date] = [:]
        func deliver(_ text: String, as name: String) throws {
            try playground.write("inbox/tmp/\(name)", text)
            try FileManager.default.moveItem(atPath: playground.path + "/inbox/tmp/\(name)", toPath: playground.path + "/inbox/new/\(name)")
        }
        func wave(_ name: String) throws {
            for _ in 0..<Int.random(in: 15...30, using: &rng) {
                counter += 1
                switch Int.random(in: 0..<10, using: &rng) {
                case 0..<4:
                    // Delivered as the Mealz side does, under a name this test can find in cur/.
                    let id = "\(name)-e\(counter)"
                    madeAt[id] = Date()
                    try deliver("{\"id\": \"\(id)\", \"type\": \"basketDelta\", \"products\": [{\"id\": \"sku-\(counter % 5)\", \"quantity\": 1}]}", as: id)
                    events.append(id)
                case 4:
                    let id = "\(name)-t\(counter)"
                    madeAt[id] = Date()
                    #expect(try run(playground, ["push", "--transfer", id, "--id", "\(id)-event", "sku-9=1"]).status == 0, "\(context)")
                    transfers.append(id)
                case 5..<7:
                    // The host acknowledges part of what was sent (a random point, never back).
                    let last = seqs(playground, "outbox").last ?? 0
                    acknowledged = max(acknowledged, Int.random(in: 0...last, using: &rng))
                    try playground.writeAtomically("cart.json", cartJSON([("sku-1", counter)], syncedThrough: acknowledging ? acknowledged : nil))
                case 7:
                    let id = "\(name)-o\(counter)"
                    madeAt[id] = Date()
                    let paid = try run(playground, ["handle-payment", "--total", "1.00", "--order-id", id])
                    #expect(paid.status == 0, "\(context): \(paid.stderr)")
                    orders.append(id)
                case 8:
                    try deliver("{ not json", as: "\(name)-bad\(counter)")
                default:
                    #expect(try run(playground, ["sync"]).status == 0, "\(context)")
                }
            }
            #expect(try run(playground, ["sync"]).status == 0, "\(context)")
        }
        func rows(_ table: String) -> [(seq: Int, at: String)] {
            query(playground, "SELECT seq, line FROM \(table) ORDER BY seq").compactMap { row in
                guard let seq = Int(row[0]), let object = try? JSONSerialization.jsonObject(with: Data(row[1].utf8)) as? [String: Any],
                      let at = object["at"] as? String else { return nil }
                return (seq, at)
            }
        }
        func snapshotNow() -> [String: [(seq: Int, at: String)]] {
            Dictionary(uniqueKeysWithValues: ["outbox", "notifications", "payments"].map { ($0, rows($0)) })
        }
        try wave("old")
        let snapshot = snapshotNow()
        try await pastRetention(retention, "the first wave is older than the retention")
        try wave("new")

        // Every record made, with its instant: the second wave's passes may have removed some of
        // the first wave's already (each pass removes what is due then; what is due only grows).
        var before = snapshot.mapValues { Dictionary(uniqueKeysWithValues: $0.map { ($0.seq, $0.at) }) }
        for (table, records) in snapshotNow() { for record in records { before[table, default: [:]][record.seq] = record.at } }
        // What the host acknowledged (or echoed), and the batches pending, as the state says.
        let state = playground.keptValue("state").flatMap {
            try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
        } ?? [:]
        let synced = state["hostSyncedThrough"] as? Int ?? 0
        acknowledged = max(synced, state["echoedThrough"] as? Int ?? 0)
        // Pending batches are rows of their own (a state saved by an older version holds them).
        let pending = Set(query(playground, "SELECT seq FROM pending").compactMap { Int($0[0]) })
            .union(((state["pending"] as? [[String: Any]]) ?? []).compactMap { $0["seq"] as? Int })
        // Rolled back and never echoed since: not acknowledged, unless syncedThrough covers them.
        let unsettled = Set(((state["rolledBack"] as? [[String: Any]]) ?? []).compactMap { $0["seq"] as? Int })
        let start = Date()
        #expect(try run(playground, ["sync"]).status == 0, "\(context)")
        let end = Date()

        var removedChecked = 0
        for (table, made) in before {
            let records = made.sorted { $0.key < $1.key }.map { (seq: $0.key, at: $0.value) }
            let kept = Set(seqs(playground, table))
            let last = records.last?.seq ?? 0
            // The rule walks up from the oldest and stops at the first record it must keep.
            var mayGo = true
            for record in records {
                if table == "outbox", unsettled.contains(record.seq), record.seq > synced {
                    #expect(kept.contains(record.seq), "\(context): outbox #\(record.seq) was rolled back and never echoed: it stays")
                    continue
                }
                let allowed = record.seq < last && (table != "outbox" || (record.seq <= acknowledged && !pending.contains(record.seq)))
                switch (allowed && mayGo) ? age(record.at, start: start, end: end, retention: retention) : .young {
                case .old:
                    removedChecked += 1
                    #expect(!kept.contains(record.seq), "\(context): \(table) #\(record.seq) (\(record.at)) is old and allowed to go (acknowledged \(acknowledged), synced \(synced), rolled back \(unsettled.sorted()), unsettled in the database \(query(playground, "SELECT seq FROM unsettled").map { $0[0] }), pending \(pending.sorted()))")
                case .young:
                    mayGo = false
                    #expect(kept.contains(record.seq), "\(context): \(table) #\(record.seq) must stay (last \(last), acknowledged \(acknowledged), pending \(pending.sorted()))")
                case .either: mayGo = false
                }
            }
        }
        #expect(removedChecked > 0, "\(context): the first wave left records old enough to go")
        #expect(seqs(playground, "outbox").last == before["outbox"]?.keys.max(), "\(context): the last record stays")

        // Old ids are forgotten: redelivered, an old event is taken again; a new one is not.
        let outboxBefore = seqs(playground, "outbox").last ?? 0
        // The start of the last pass, which removed what was old by then.
        var latestPass = start
        if let old = events.first(where: { $0.hasPrefix("old-e") }) {
            try deliver("{\"id\": \"\(old)\", \"type\": \"basketDelta\", \"products\": [{\"id\": \"sku-7\", \"quantity\": 1}]}", as: "again-\(old)")
            latestPass = Date()
            #expect(try run(playground, ["sync"]).status == 0)
            #expect((seqs(playground, "outbox").last ?? 0) == outboxBefore + 1, "\(context): \(old), past the retention, is taken again")
        }
        if let young = events.last(where: { $0.hasPrefix("new-e") }) {
            let last = seqs(playground, "outbox").last ?? 0
            try deliver("{\"id\": \"\(young)\", \"type\": \"basketDelta\", \"products\": [{\"id\": \"sku-7\", \"quantity\": 1}]}", as: "again-\(young)")
            latestPass = Date()
            #expect(try run(playground, ["sync"]).status == 0)
            if madeAt[young]! >= latestPass.addingTimeInterval(-retention) {
                #expect((seqs(playground, "outbox").last ?? 0) == last, "\(context): \(young), within the retention, is a duplicate")
            }
        }
        let remembered = Set(query(playground, "SELECT id FROM orders").map { $0[0] } + query(playground, "SELECT id FROM transfers").map { $0[0] })
        for id in orders + transfers {
            if id.hasPrefix("old-") { #expect(!remembered.contains(id), "\(context): \(id) is forgotten") }
            else if madeAt[id]! >= latestPass.addingTimeInterval(-retention) { #expect(remembered.contains(id), "\(context): \(id) is remembered") }
        }
        // Old files of cur/ and bad/ are gone (a bad entry with its .error); new ones stay.
        for folder in ["inbox/cur", "inbox/bad"] {
            let names = playground.names(folder)
            #expect(!names.contains { $0.hasPrefix("old-") }, "\(context): \(folder) keeps old files: \(names)")
        }
        let newBad = playground.names("inbox/bad").filter { $0.hasPrefix("new-") && !$0.hasSuffix(".error") }
        for name in newBad { #expect(playground.names("inbox/bad").contains(name + ".error"), "\(context): \(name) keeps its .error") }
        let cur = Set(playground.names("inbox/cur"))
        for id in events where id.hasPrefix("new-") && madeAt[id]! >= latestPass.addingTimeInterval(-retention) {
            #expect(cur.contains(id), "\(context): \(id) stays in cur/")
        }
        #expect(try run(playground, ["status"]).status == 0)
    }
}

extension RetentionTests {
    /// A file left as a killed writer leaves a temporary: last written at `age`, given to `owner`.
    func plantTemporary(_ path: String, in playground: Playground, age: Date, owner: UInt32? = nil) throws {
        try playground.write(path, "{\"products\":[]}")
        try FileManager.default.setAttributes([.modificationDate: age], ofItemAtPath: playground.path + "/" + path)
        if let owner { #expect(chown(playground.path + "/" + path, owner, owner) == 0) }
    }

    /// A database full of history shrinks back once retention removed it (`auto_vacuum`), and
    /// the agent keeps the write-ahead log bounded too.
    @Test func theDatabaseShrinksBack() async throws {
        let playground = try Playground()
        #expect(try run(playground, ["init"]).status == 0)
        let retention = 1.0
        let padding = String(repeating: "x", count: 200)
        for index in 0..<1200 {
            let name = "e\(index)"
            try playground.write("inbox/tmp/\(name)", "{\"id\": \"\(name)-\(padding)\", \"type\": \"basketDelta\", \"products\": [{\"id\": \"sku-\(index % 10)\", \"quantity\": 1}]}")
            try FileManager.default.moveItem(atPath: playground.path + "/inbox/tmp/\(name)", toPath: playground.path + "/inbox/new/\(name)")
        }
        #expect(try run(playground, ["sync"]).status == 0)
        // The host applies everything.
        let applied = try run(playground, ["apply"])
        #expect(applied.status == 0, "\(applied.stderr)")
        #expect(try run(playground, ["sync"]).status == 0)
        func size() -> Int {
            ["", "-wal"].reduce(0) { total, suffix in
                total + ((try? FileManager.default.attributesOfItem(atPath: playground.path + "/.basket-sync/state.db" + suffix)[.size] as? Int) ?? 0)
            }
        }
        let full = size()
        #expect(full > 500_000, "1,200 events of 200-byte ids fill the database: \(full) bytes")
        // Retention set once the history is made (making it takes longer than the retention).
        try playground.write("basket-sync.json", "{\"retention\": {\"days\": \(retention / 86_400)}}")
        try await pastRetention(retention, "the history is older than the retention")
        // One slice removes at most 1,000 of each kind: two passes remove everything due.
        #expect(try run(playground, ["sync"]).status == 0)
        #expect(try run(playground, ["sync"]).status == 0)
        let after = size()
        #expect(after < full / 4, "the database gave the space back: \(full) → \(after) bytes")
        #expect(playground.names("inbox/cur").isEmpty, "\(playground.names("inbox/cur").count) files left in cur/")
        #expect(query(playground, "SELECT COUNT(*) FROM inbox").first == ["0"])
        #expect(query(playground, "SELECT COUNT(*) FROM outbox").first == ["1"], "the last record stays")
        #expect(query(playground, "PRAGMA freelist_count").first == ["0"], "no free page left in the file")
    }

    /// A database written before the ids moved out of the state (schema 1: orders and transfers
    /// in the state blob, no cart column) is migrated when opened: a retried order is still a
    /// duplicate, the records are kept.
    @Test func anOlderDatabaseKeepsItsOrdersAndTransfers() throws {
        let playground = try Playground()
        #expect(try run(playground, ["init"]).status == 0)
        #expect(try run(playground, ["set-store", "store-1", "--mode", "retailer"]).status == 0)
        try playground.writeAtomically("cart.json", cartJSON([("sku-1", 1)]))
        #expect(try run(playground, ["handle-payment", "--total", "2.00", "--order-id", "o-1"]).status == 0)
        #expect(try run(playground, ["push", "--transfer", "t-1", "sku-2=1"]).status == 0)
        #expect(try run(playground, ["sync"]).status == 0)
        let outboxBefore = query(playground, "SELECT COUNT(*) FROM outbox").first
        // Back to what schema 1 kept: the ids in the state, no tables for them.
        var handle: OpaquePointer?
        #expect(sqlite3_open(playground.path + "/.basket-sync/state.db", &handle) == SQLITE_OK)
        let blob = playground.keptValue("state") ?? ""
        var state = (try? JSONSerialization.jsonObject(with: Data(blob.utf8)) as? [String: Any]) ?? [:]
        state["recordedOrders"] = ["o-1": 1]
        state["landedTransfers"] = ["t-1"]
        let text = String(decoding: try JSONSerialization.data(withJSONObject: state), as: UTF8.self).replacingOccurrences(of: "'", with: "''")
        // Layout 1 kept each value in a row of its own.
        let kept = KeptValues.decode(playground.keptValuesRow() ?? [])
        #expect(kept.contains { $0.key == "state" }, "\(kept.map(\.key))")
        for (key, value) in kept where key != "state" {
            let hex = value.map { String(format: "%02X", $0) }.joined()
            #expect(sqlite3_exec(handle, "INSERT INTO meta(cart, key, value) VALUES(0, '\(key)', X'\(hex)')", nil, nil, nil) == SQLITE_OK, "\(key)")
        }
        for sql in ["DELETE FROM orders", "DELETE FROM transfers", "DROP TABLE kept", "INSERT INTO meta(cart, key, value) VALUES(0, 'state', CAST('\(text)' AS BLOB))"] {
            #expect(sqlite3_exec(handle, sql, nil, nil, nil) == SQLITE_OK, "\(sql)")
        }
        // The tables as layout 1 made them: no cart column (the tables of layout 2 made empty).
        let before: [(String, String, String)] = [
            ("meta", "key TEXT PRIMARY KEY, value BLOB NOT NULL", "key, value"), ("outbox", "seq INTEGER PRIMARY KEY, line BLOB NOT NULL", "seq, line"),
            ("notifications", "seq INTEGER PRIMARY KEY, line BLOB NOT NULL", "seq, line"), ("payments", "seq INTEGER PRIMARY KEY, line BLOB NOT NULL", "seq, line"),
            ("inbox", "id TEXT PRIMARY KEY, file TEXT NOT NULL, outcome TEXT NOT NULL, at TEXT NOT NULL", "id, file, outcome, at"),
            ("reports", "n INTEGER PRIMARY KEY, at TEXT NOT NULL, level TEXT NOT NULL, message TEXT NOT NULL", "n, at, level, message"),
            ("completions", "order_id TEXT PRIMARY KEY, payment INTEGER NOT NULL, at TEXT NOT NULL", "order_id, payment, at"),
        ]
        for (table, columns, names) in before {
            for sql in ["CREATE TABLE old(\(columns))", "INSERT INTO old SELECT \(names) FROM \(table)", "DROP TABLE \(table)", "ALTER TABLE old RENAME TO \(table)"] {
                #expect(sqlite3_exec(handle, sql, nil, nil, nil) == SQLITE_OK, "\(sql)")
            }
        }
        for sql in ["DROP TABLE orders", "DROP TABLE transfers", "DROP TABLE unfinished", "DROP TABLE settled", "DROP TABLE carts", "PRAGMA user_version = 1"] {
            #expect(sqlite3_exec(handle, sql, nil, nil, nil) == SQLITE_OK, "\(sql)")
        }
        sqlite3_close(handle)
        #expect(query(playground, "SELECT COUNT(*) FROM outbox").first == outboxBefore)
        // A reader first (a host's status or wait loop after an upgrade): it converts, then reads.
        let status = try run(playground, ["status"])
        #expect(status.status == 0, "\(status.stderr)")

        let retry = try run(playground, ["handle-payment", "--total", "2.00", "--order-id", "o-1"])
        #expect(retry.status == 0 && retry.stdout.contains("duplicate"), "\(retry.stdout) \(retry.stderr)")
        #expect(try run(playground, ["push", "--transfer", "t-1", "sku-2=1"]).status == 0)
        #expect(try run(playground, ["sync"]).status == 0)
        #expect(query(playground, "SELECT COUNT(*) FROM outbox").first == outboxBefore, "the transfer did not land twice")
        #expect(query(playground, "SELECT id FROM orders").map { $0[0] } == ["o-1"])
        #expect(query(playground, "PRAGMA user_version").first == ["5"])
        #expect(query(playground, "SELECT DISTINCT cart FROM outbox").map { $0[0] } == ["0"], "every row is cart 0's")

        // Layout 3 (before the host cart's changes were kept beside it) is read as it is by a
        // reader, and brought up by the next writer.
        #expect(sqlite3_open(playground.path + "/.basket-sync/state.db", &handle) == SQLITE_OK)
        #expect(sqlite3_exec(handle, "PRAGMA user_version = 3", nil, nil, nil) == SQLITE_OK)
        sqlite3_close(handle)
        let reader = try run(playground, ["status"])
        #expect(reader.status == 0, "\(reader.stderr)")
        #expect(try run(playground, ["sync"]).status == 0)
        #expect(query(playground, "PRAGMA user_version").first == ["5"])

        // A database of a later layout is refused, not read wrong nor written over.
        #expect(sqlite3_open(playground.path + "/.basket-sync/state.db", &handle) == SQLITE_OK)
        #expect(sqlite3_exec(handle, "PRAGMA user_version = 6", nil, nil, nil) == SQLITE_OK)
        sqlite3_close(handle)
        for command in [["sync"], ["status"]] {
            let refused = try run(playground, command)
            #expect(refused.status == 74 && refused.stderr.contains("written by a newer basket-sync"), "\(command): \(refused.status) \(refused.stderr)")
        }
    }
}

extension RetentionTests {
    /// A legacy host (no syncedThrough) lets two batches roll back,
    /// then its cart echoes only the second, late. The first was never applied: it stays, whatever
    /// its age, and `wait --after 0` still shows it.
    @Test func aBatchRolledBackAndNeverEchoedStays() async throws {
        let playground = try Playground()
        #expect(try run(playground, ["init"]).status == 0)
        let retention = 1.0
        try playground.write("basket-sync.json", "{\"pendingTimeoutSeconds\": 0.2, \"retention\": {\"days\": \(retention / 86_400)}}")
        try playground.writeAtomically("cart.json", cartJSON([("x", 1)]))
        #expect(try run(playground, ["sync"]).status == 0)
        #expect(try run(playground, ["push", "sku-1=+1"]).status == 0)
        #expect(try run(playground, ["push", "sku-2=+2"]).status == 0)
        #expect(try run(playground, ["sync"]).status == 0)
        let pushed = Date()
        try await eventually("both windows are over") { Date() > pushed.addingTimeInterval(0.4) }
        #expect(try run(playground, ["sync"]).status == 0)
        try playground.writeAtomically("cart.json", cartJSON([("x", 1), ("sku-2", 2)]))
        #expect(try run(playground, ["sync"]).status == 0)
        try await pastRetention(retention, "the records are older than the retention")
        #expect(try run(playground, ["push", "sku-3=+1"]).status == 0)
        #expect(try run(playground, ["sync"]).status == 0)
        #expect(seqs(playground, "outbox").contains(1), "#1 was never applied: \(seqs(playground, "outbox"))")
        #expect(!seqs(playground, "outbox").contains(2), "#2 was echoed (late): it goes")
        let waited = try run(playground, ["wait", "--after", "0", "--timeout", "0"])
        #expect(waited.stdout.contains("\"seq\":1,"), "\(waited.stdout)")
        // A syncedThrough covering it acknowledges it: then it goes too.
        try playground.writeAtomically("cart.json", cartJSON([("x", 1), ("sku-2", 2)], syncedThrough: 3))
        #expect(try run(playground, ["sync"]).status == 0)
        #expect(try run(playground, ["push", "sku-4=+1"]).status == 0)
        #expect(try run(playground, ["sync"]).status == 0)
        try await pastRetention(retention, "older than the retention again")
        #expect(try run(playground, ["sync"]).status == 0)
        #expect(!seqs(playground, "outbox").contains(1), "acknowledged by syncedThrough 3: \(seqs(playground, "outbox"))")
    }
}

extension RetentionTests {
    /// An order whose completion failed (or never ran to its end) is the one whose retry must
    /// still come: retention keeps it and its payment record; an order whose
    /// completion finished is forgotten as documented.
    @Test func anOrderWhoseCompletionNeverFinishedIsKept() async throws {
        let playground = try Playground()
        #expect(try run(playground, ["init"]).status == 0)
        let retention = 1.0
        try playground.write("basket-sync.json", "{\"retention\": {\"days\": \(retention / 86_400)}}")
        #expect(try run(playground, ["set-store", "s1", "--mode", "retailer"]).status == 0)
        try playground.writeAtomically("cart.json", cartJSON([("sku-1", 2)]))
        #expect(try run(playground, ["handle-payment", "--total", "5.00", "--order-id", "failed", "--then", "/bin/sh", "-c", "exit 3"]).status == 3)
        #expect(try run(playground, ["handle-payment", "--total", "6.00", "--order-id", "finished", "--then", "/bin/true"]).status == 0)
        #expect(try run(playground, ["push", "sku-1=+1"]).status == 0)
        try await pastRetention(retention, "older than the retention")
        #expect(try run(playground, ["sync"]).status == 0)
        let orders = query(playground, "SELECT id FROM orders").map { $0[0] }
        #expect(orders == ["failed"], "\(orders)")
        let retry = try run(playground, ["handle-payment", "--total", "5.00", "--order-id", "failed", "--json", "--then", "/bin/true"])
        #expect(retry.status == 0 && retry.stdout.contains("\"duplicate\":true"), "\(retry.stdout) \(retry.stderr)")
        let recorded = query(playground, "SELECT line FROM payments").filter { $0[0].contains("\"orderId\":\"failed\"") }
        #expect(recorded.count == 1, "recorded once: \(recorded)")
        // Its completion finished now: the next slice may forget it.
        #expect(query(playground, "SELECT order_id FROM unfinished").isEmpty)
    }
}

extension RetentionTests {
    /// Whoever writes the sync directory swaps the files retention will remove for links to a
    /// file and a folder outside, and a `.error` for a link too: retention removes the links, never
    /// what they lead to.
    @Test func retentionRemovesLinksNotWhatTheyLeadTo() async throws {
        let playground = try Playground()
        let outside = try Playground()
        try outside.write("secret", "keep me")
        try FileManager.default.createDirectory(atPath: outside.path + "/folder", withIntermediateDirectories: false)
        try outside.write("folder/inner", "keep me too")
        #expect(try run(playground, ["init"]).status == 0)
        let retention = 1.0
        try playground.write("basket-sync.json", "{\"retention\": {\"days\": \(retention / 86_400)}}")
        for (name, text) in [("e1", "{\"id\": \"e1\", \"type\": \"basketDelta\", \"products\": [{\"id\": \"A\", \"quantity\": 1}]}"),
                             ("e2", "{\"id\": \"e2\", \"type\": \"basketDelta\", \"products\": [{\"id\": \"A\", \"quantity\": 1}]}"),
                             ("bad1", "{ not json")] {
            try playground.write("inbox/tmp/\(name)", text)
            try FileManager.default.moveItem(atPath: playground.path + "/inbox/tmp/\(name)", toPath: playground.path + "/inbox/new/\(name)")
        }
        #expect(try run(playground, ["sync"]).status == 0)
        let files = FileManager.default
        for (path, target) in [("inbox/cur/e1", "secret"), ("inbox/cur/e2", "folder"), ("inbox/bad/bad1.error", "secret")] {
            try files.removeItem(atPath: playground.path + "/" + path)
            try files.createSymbolicLink(atPath: playground.path + "/" + path, withDestinationPath: outside.path + "/" + target)
        }
        try await pastRetention(retention)
        #expect(try run(playground, ["sync"]).status == 0)
        #expect(playground.names("inbox/cur").isEmpty && playground.names("inbox/bad").isEmpty, "\(playground.names("inbox/cur")) \(playground.names("inbox/bad"))")
        #expect(outside.read("secret") == "keep me" && outside.read("folder/inner") == "keep me too")
    }
}

extension RetentionTests {
    /// With retention set, the temporaries a process killed while writing left — an `apply`
    /// beside the cart, a pass in `inbox/bad/` — go once over an hour old: only files of this
    /// account's named as basket-sync names the temporaries of the files it writes there (the
    /// cart, the `.error`s), never a younger one (a writer may be busy with it), another
    /// account's, a link, or any other name.
    @Test func temporariesAKilledWriterLeftGoOnceOverAnHourOld() throws {
        let playground = try Playground()
        #expect(try run(playground, ["init"]).status == 0)
        try playground.write("basket-sync.json", "{\"retention\": {\"days\": 30}}")
        try playground.write("inbox/tmp/bad1", "{ not json")
        try FileManager.default.moveItem(atPath: playground.path + "/inbox/tmp/bad1", toPath: playground.path + "/inbox/new/bad1")
        #expect(try run(playground, ["sync"]).status == 0)
        let old = Date().addingTimeInterval(-2 * 3600)
        let files = FileManager.default
        func plant(_ path: String, age: Date, owner: UInt32? = nil) throws { try plantTemporary(path, in: playground, age: age, owner: owner) }
        let stale = [".cart.json.0123456789abcdef.tmp", "inbox/bad/.bad1.error.fedcba9876543210.tmp"]
        for path in stale { try plant(path, age: old) }
        let kept = [".cart.json.00000000000000aa.tmp", ".cart.json.notahexnumber000.tmp", ".cart.json.0123456789ABCDEF.tmp",
                    "cart.json.0123456789abcdef.tmp", ".cart.json.0123456789abcdef.tmp.x",
                    // Named as basket-sync names a temporary, but of a file it never writes there.
                    ".precious.db.1111111111111111.tmp", "inbox/bad/.bad1.1111111111111111.tmp"]
        try plant(kept[0], age: Date())
        for path in kept.dropFirst() { try plant(path, age: old) }
        try plant(".y.2222222222222222.tmp", age: old, owner: 4211)
        try files.createSymbolicLink(atPath: playground.path + "/.z.3333333333333333.tmp", withDestinationPath: "cart.json")
        #expect(try run(playground, ["sync"]).status == 0)
        for path in stale { #expect(!files.fileExists(atPath: playground.path + "/" + path), "\(path) goes") }
        for path in kept + [".y.2222222222222222.tmp"] { #expect(files.fileExists(atPath: playground.path + "/" + path), "\(path) stays") }
        #expect((try? files.destinationOfSymbolicLink(atPath: playground.path + "/.z.3333333333333333.tmp")) == "cart.json", "a link stays")
        #expect(playground.names("inbox/bad").sorted() == [".bad1.1111111111111111.tmp", "bad1", "bad1.error"])
    }

    /// Without retention, the temporaries an `apply` killed before its rename left beside the cart
    /// go with the next `apply` (it holds the cart lock no other `apply` writes without), once
    /// over an hour old: a host whose apply is killed now and then does not gather copies of its
    /// cart. A younger one, another account's or another name stays.
    @Test func theNextApplyRemovesWhatAKilledApplyLeft() throws {
        let playground = try Playground()
        #expect(try run(playground, ["init"]).status == 0)
        try playground.write("cart.json", cartJSON([], syncedThrough: 0))
        func plant(_ name: String, age: Date, owner: UInt32? = nil) throws { try plantTemporary(name, in: playground, age: age, owner: owner) }
        let stale = [".cart.json.0123456789abcdef.tmp", ".cart.json.fedcba9876543210.tmp"]
        for name in stale { try plant(name, age: Date().addingTimeInterval(-2 * 3600)) }
        try plant(".cart.json.00000000000000aa.tmp", age: Date())
        try plant(".cart.json.00000000000000bb.tmp", age: Date().addingTimeInterval(-2 * 3600), owner: 4211)
        try plant(".other.json.0123456789abcdef.tmp", age: Date().addingTimeInterval(-2 * 3600))
        #expect(try run(playground, ["push", "A=+1"]).status == 0)
        #expect(try run(playground, ["sync"]).status == 0)
        #expect(try run(playground, ["apply"]).status == 0)
        #expect(products(try JSONSerialization.jsonObject(with: Data(playground.read("cart.json").utf8)) as! [String: Any]) == ["A": 1])
        let left = playground.names(".").filter { $0.hasSuffix(".tmp") }.sorted()
        #expect(left == [".cart.json.00000000000000aa.tmp", ".cart.json.00000000000000bb.tmp", ".other.json.0123456789abcdef.tmp"], "\(left)")
    }

    /// Retention counts the time that passed: a `sync` run with the wall clock set two days
    /// ahead (faketime, that process's clock alone) forgets none of the ids taken a moment before,
    /// so that an event redelivered and an order paid again are known, and removes no temporary
    /// a writer is busy with; records it made are stamped ahead, which shows the clock was moved.
    @Test func aWallClockSetForwardAgesNothing() throws {
        let playground = try Playground()
        #expect(try run(playground, ["init"]).status == 0)
        try playground.write("basket-sync.json", "{\"retention\": {\"days\": 1}}")
        #expect(try run(playground, ["set-store", "store-1", "--mode", "retailer"]).status == 0)
        try playground.writeAtomically("cart.json", cartJSON([("sku-1", 1)]))
        func deliver(_ id: String, as name: String) throws {
            try playground.write("inbox/tmp/\(name)", "{\"id\": \"\(id)\", \"type\": \"basketDelta\", \"products\": [{\"id\": \"sku-2\", \"quantity\": 1}]}")
            try FileManager.default.moveItem(atPath: playground.path + "/inbox/tmp/\(name)", toPath: playground.path + "/inbox/new/\(name)")
        }
        try deliver("e1", as: "d1")
        #expect(try run(playground, ["sync"]).status == 0)
        #expect(try run(playground, ["handle-payment", "--total", "1.00", "--order-id", "o1"]).status == 0)
        let ids = query(playground, "SELECT COUNT(*) FROM inbox").first?.first
        #expect(ids == "1")
        // A temporary of an apply running now (as basket-sync names it), a minute old.
        let temporary = ".cart.json.0123456789abcdef.tmp"
        try playground.write(temporary, "{\"products\":[]}")
        try FileManager.default.setAttributes([.modificationDate: Date().addingTimeInterval(-60)], ofItemAtPath: playground.path + "/" + temporary)

        let clock = playground.path + "/clock"
        try "+2d".write(toFile: clock, atomically: true, encoding: .utf8)
        try deliver("e2", as: "d2")
        let ahead = try basketSync(["-f", "+0", "/usr/bin/env", "-u", "FAKETIME", "FAKETIME_TIMESTAMP_FILE=\(clock)", "FAKETIME_NO_CACHE=1",
                                    "FAKETIME_DONT_FAKE_MONOTONIC=1", "SWIFT_BACKTRACE=enable=no", binary.path, "-C", playground.path, "sync"],
                                   executable: "/usr/bin/faketime")
        #expect(ahead.status == 0, "\(ahead.stderr)")
        let stamped = try #require(playground.records("outbox.jsonl").first { $0["source"] as? String == "e2" }?["at"] as? String)
        let at = try #require(try? Date.ISO8601FormatStyle(includingFractionalSeconds: true).parse(stamped))
        try #require(at > Date().addingTimeInterval(86_400), "the sync ran with its clock two days ahead (\(stamped))")
        #expect(query(playground, "SELECT COUNT(*) FROM inbox").first?.first == "2", "no id forgotten")
        #expect(query(playground, "SELECT COUNT(*) FROM orders").first?.first == "1", "no order forgotten")
        #expect(FileManager.default.fileExists(atPath: playground.path + "/" + temporary), "a temporary a minute old stays")

        // Back on the right clock: the redelivery is a duplicate, the order is known.
        try deliver("e1", as: "d3")
        let again = try run(playground, ["sync"])
        #expect(again.status == 0 && again.stdout.contains("1 duplicate"), "\(again.stdout) \(again.stderr)")
        #expect(playground.records("outbox.jsonl").filter { $0["source"] as? String == "e1" }.count == 1, "e1 taken once")
        let paid = try run(playground, ["handle-payment", "--total", "1.00", "--order-id", "o1"])
        #expect(paid.status == 0)
        #expect(playground.records("payments.jsonl").filter { ($0["type"] as? String) == "handlePayment" }.count == 1, "o1 recorded once: \(paid.stdout)")
    }

    /// Every row retention ages notes the clock as it is stamped: an event taken and an order
    /// paid by processes whose clock was two days behind (retention not even set yet), then
    /// retention of one day set and a `sync` on the right clock — neither is forgotten: the event
    /// redelivered is a duplicate, the order paid again is not recorded twice.
    @Test func whatWasStampedOnAClockBehindIsNotAgedOnceItIsSetRight() throws {
        let playground = try Playground()
        #expect(try run(playground, ["init"]).status == 0)
        #expect(try run(playground, ["set-store", "store-1", "--mode", "retailer"]).status == 0)
        try playground.writeAtomically("cart.json", cartJSON([("sku-1", 1)]))
        let clock = playground.path + "/clock"
        try "-2d".write(toFile: clock, atomically: true, encoding: .utf8)
        func behind(_ arguments: [String]) throws -> Run {
            try basketSync(["-f", "+0", "/usr/bin/env", "-u", "FAKETIME", "FAKETIME_TIMESTAMP_FILE=\(clock)", "FAKETIME_NO_CACHE=1",
                            "FAKETIME_DONT_FAKE_MONOTONIC=1", "SWIFT_BACKTRACE=enable=no", binary.path, "-C", playground.path] + arguments,
                           executable: "/usr/bin/faketime")
        }
        func deliver(_ name: String) throws {
            try playground.write("inbox/tmp/\(name)", "{\"id\": \"e1\", \"type\": \"basketDelta\", \"products\": [{\"id\": \"sku-2\", \"quantity\": 1}]}")
            try FileManager.default.moveItem(atPath: playground.path + "/inbox/tmp/\(name)", toPath: playground.path + "/inbox/new/\(name)")
        }
        try deliver("d1")
        let taken = try behind(["sync"])
        #expect(taken.status == 0, "\(taken.stderr)")
        #expect(try behind(["handle-payment", "--total", "1.00", "--order-id", "o1"]).status == 0)
        let stamped = try #require(playground.records("outbox.jsonl").first?["at"] as? String)
        let at = try #require(try? Date.ISO8601FormatStyle(includingFractionalSeconds: true).parse(stamped))
        try #require(at < Date().addingTimeInterval(-86_400), "the event was taken on a clock two days behind (\(stamped))")

        try playground.write("basket-sync.json", "{\"retention\": {\"days\": 1}}")
        #expect(try run(playground, ["sync"]).status == 0)
        #expect(query(playground, "SELECT COUNT(*) FROM inbox").first?.first == "1", "the event's id kept")
        #expect(query(playground, "SELECT COUNT(*) FROM orders").first?.first == "1", "the order kept")
        try deliver("d2")
        let again = try run(playground, ["sync"])
        #expect(again.stdout.contains("1 duplicate"), "\(again.stdout) \(again.stderr)")
        #expect(playground.records("outbox.jsonl").count == 1, "e1 taken once")
        #expect(try run(playground, ["handle-payment", "--total", "1.00", "--order-id", "o1"]).status == 0)
        #expect(playground.records("payments.jsonl").filter { ($0["type"] as? String) == "handlePayment" }.count == 1, "o1 recorded once")
    }
}
