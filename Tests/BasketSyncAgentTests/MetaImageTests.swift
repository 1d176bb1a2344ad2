@testable import BasketSyncAgent
import Foundation
import Testing
import TestSupport

/// A cart's kept values are read once a transaction and written at its commit: whatever the
/// transaction does — rows of several carts set, removed and read again, large values among
/// them, savepoints released or rolled back, a cart's rows all deleted, the transaction itself
/// rolled back, another process writing between — every read sees what a row-by-row store
/// would, and the table after it holds what a committed transaction wrote and nothing of one
/// rolled back.
@Suite struct MetaImageTests {
    /// Every key has its own place, and the place gives the key back.
    @Test func everyKeyHasItsOwnPlace() {
        #expect(MetaKey.all.enumerated().allSatisfy { $0.offset == $0.element.ordinal }, "\(MetaKey.all.map(\.text))")
        #expect(Set(MetaKey.all.map(\.text)).count == MetaKey.count)
        func ordinal(_ text: String, from first: Int = 0) -> Int? { Array(text.utf8).withUnsafeBufferPointer { MetaKey.ordinal(of: $0, from: first) } }
        #expect(MetaKey.all.allSatisfy { ordinal($0.text) == $0.ordinal && ordinal($0.text, from: MetaKey.count - 1) == $0.ordinal })
        #expect(ordinal("hostCart") == nil && ordinal("") == nil && MetaKey.hostCart.hasRowOfItsOwn)
    }

    /// The row as the layout says, read without the product's decoder (``KeptValues``).
    static func entries(_ row: [UInt8]) -> [String: [UInt8]]? {
        let entries = KeptValues.decode(row)
        return KeptValues.encode(entries) == row ? Dictionary(entries.map { ($0.key, $0.value) }) { $1 } : nil
    }

    /// The `meta` rows of `cart`, by key, and its row of values (under "values").
    static func rows(_ database: Database, _ cart: Int64) throws -> [String: [UInt8]] {
        let statement = try database.connection.prepare("SELECT key, value FROM meta WHERE cart = ?")
        statement.bind(1, cart)
        var rows: [String: [UInt8]] = [:]
        while try statement.step() { rows[statement.text(0)] = statement.blob(1) }
        let kept = try database.connection.prepare("SELECT kept FROM kept WHERE cart = ?")
        kept.bind(1, cart)
        if try kept.step() { rows["values"] = kept.blob(0) }
        return rows
    }

    /// A cart a database of the layout before kept a row for each value is read from those
    /// rows; its first write leaves one row of values holding them all, the host cart's row kept.
    @Test func aCartKeptARowForEachValueIsReadAndWrittenAsOneRow() throws {
        let directory = try EngineTests.Directory()
        let database = try Store(directory: directory.path, create: true).database
        try database.connection.execute("""
            INSERT INTO meta(cart, key, value) VALUES(9, 'state', CAST('{"s":1}' AS BLOB)), (9, 'note.cartSeen', CAST('seen' AS BLOB)),
              (9, 'given.outbox', CAST('1 2 3 4' AS BLOB)), (9, 'hostCart', CAST('cart' AS BLOB)), (9, 'someday', CAST('x' AS BLOB))
            """)
        #expect(try database.meta(9, .state) == Array(#"{"s":1}"#.utf8))
        try database.withTransaction { () throws(AgentError) in
            #expect(try database.meta(9, .note(.cartSeen)) == Array("seen".utf8))
            try database.setMeta(9, .note(.cartRead), Array("read".utf8))
        }
        let rows = try Self.rows(database, 9)
        #expect(Set(rows.keys) == ["values", "hostCart", "someday"], "\(rows.keys)")
        let entries = try #require(Self.entries(rows["values"] ?? []))
        #expect(entries == ["state": Array(#"{"s":1}"#.utf8), "note.cartSeen": Array("seen".utf8), "given.outbox": Array("1 2 3 4".utf8), "note.cartRead": Array("read".utf8)])
        #expect(try database.meta(9, .hostCart) == Array("cart".utf8) && database.meta(9, .given(.outbox)) == Array("1 2 3 4".utf8))
    }

    /// A row of values that does not read as one is an error that says what to do, not values lost.
    @Test func aDamagedRowOfValuesIsAnError() throws {
        let directory = try EngineTests.Directory()
        let database = try Store(directory: directory.path, create: true).database
        // Damaged by another process (its own connection): the values this one read are read again.
        #expect(try database.meta(0, .state) != nil)
        try SQLiteConnection(path: database.databasePath).execute("UPDATE kept SET kept = X'05737461' WHERE cart = 0")
        #expect(throws: AgentError.self) { try database.meta(0, .state) }
        do { _ = try database.meta(0, .state) } catch {
            #expect(error.description.contains("the sync directory's kept values") && error.description.contains("restore .basket-sync/ from a backup")
                    && error.description.contains("init --adopt"), "\(error)")
        }
    }

    struct Failed: Error {}

    /// A seeded run of transactions against a model: a dictionary per cart, copied at each
    /// savepoint and transaction so that one rolled back is put back as it was.
    @Test func readsAndTheTableFollowARowByRowModel() throws {
        let seed = Knobs.seed
        var random = SplitMix64(seed: seed)
        let directory = try EngineTests.Directory()
        let database = try Store(directory: directory.path, create: true).database
        let other = try Store(directory: directory.path, create: false).database
        let carts: [Int64] = [0, 7, 8]
        let keys: [MetaKey] = [.state, .deadline, .hostCart, .note(.cartSeen), .note(.cartRead), .given(.outbox), .cartVersions]
        // What the table holds: what was there when the run began (cart 0's own rows), then the model's.
        var committed: [Int64: [String: [UInt8]]] = [:]
        for cart in carts {
            for key in MetaKey.all + [.hostCart, .hostCartChanges] { if let value = try database.meta(cart, key) { committed[cart, default: [:]][key.text] = value } }
        }
        var steps: [String] = []
        func value() -> [UInt8] {
            // Now and then over the size read with the others (a large cart's host cart).
            let size = random.below(8) == 0 ? 4096 + random.below(3000) : random.below(40)
            return (0..<size).map { _ in UInt8(truncatingIfNeeded: random.below(256)) }
        }
        func context() -> Comment { "seed \(seed); steps \(steps.suffix(40).joined(separator: " "))" }
        for round in 0..<200 {
            var model = committed
            let rollsBack = random.below(4) == 0
            do {
                try database.withTransaction { () throws(AgentError) in
                    for _ in 0..<(1 + random.below(12)) {
                        let cart = carts[random.below(carts.count)]
                        let key = keys[random.below(keys.count)]
                        switch random.below(6) {
                        case 0, 1:
                            let bytes = value()
                            steps.append("\(round):set \(cart) \(key.text) \(bytes.count)")
                            try database.setMeta(cart, key, bytes)
                            model[cart, default: [:]][key.text] = bytes
                        case 2:
                            steps.append("\(round):delete \(cart) \(key.text)")
                            try database.setMeta(cart, key, nil)
                            model[cart]?[key.text] = nil
                        case 3:
                            // A savepoint with its own writes, released or rolled back.
                            let before = model
                            let undone = random.below(2) == 0
                            steps.append("\(round):savepoint \(undone ? "undone" : "kept")")
                            do {
                                try database.withSavepoint { () throws(AgentError) in
                                    for _ in 0..<(1 + random.below(4)) {
                                        let cart = carts[random.below(carts.count)]
                                        let key = keys[random.below(keys.count)]
                                        // A cart's rows deleted inside the savepoint, then read again.
                                        if cart != 0, random.below(6) == 0 {
                                            try database.removeCart(cart)
                                            model[cart] = nil
                                            #expect(try database.meta(cart, key) == nil, "\(context())")
                                            continue
                                        }
                                        let bytes = random.below(3) == 0 ? nil : value()
                                        try database.setMeta(cart, key, bytes)
                                        model[cart, default: [:]][key.text] = bytes
                                        #expect(try database.meta(cart, key) == bytes, "\(context())")
                                    }
                                    if undone { throw .refused("undone") }
                                }
                            } catch {
                                model = before
                            }
                        case 4 where cart != 0:
                            steps.append("\(round):remove \(cart)")
                            try database.removeCart(cart)
                            model[cart] = nil
                        default:
                            steps.append("\(round):read \(cart) \(key.text)")
                        }
                        // Every key of every cart reads as the model has it.
                        for cart in carts {
                            for key in keys { #expect(try database.meta(cart, key) == model[cart]?[key.text], "\(context()): \(cart) \(key.text)") }
                        }
                    }
                    if rollsBack { throw .refused("rolled back") }
                }
            } catch {
                #expect(rollsBack, "\(context()): \(error)")
                model = committed
            }
            committed = model
            // Another process writes now and then: what this one read before is read again.
            if random.below(5) == 0 {
                let cart = carts[random.below(carts.count)]
                let key = keys[random.below(keys.count)]
                let bytes = random.below(3) == 0 ? nil : value()
                steps.append("\(round):other \(cart) \(key.text) \(bytes?.count ?? -1)")
                try other.withTransaction { () throws(AgentError) in try other.setMeta(cart, key, bytes) }
                committed[cart, default: [:]][key.text] = bytes
            }
            // The table itself, read outside any transaction, and its rows as the layout says.
            for cart in carts {
                for key in keys { #expect(try database.meta(cart, key) == committed[cart]?[key.text], "\(context()): the table, \(cart) \(key.text)") }
                let rows = try Self.rows(database, cart)
                var held = rows["values"].map { Self.entries($0) ?? ["unreadable": []] } ?? [:]
                held["hostCart"] = rows["hostCart"]
                #expect(keys.allSatisfy { held[$0.text] == committed[cart]?[$0.text] }, "\(context()): the rows of cart \(cart)")
            }
        }
    }
}
