import CSQLite
import TestSupport

extension Playground {
    /// Rows of a read-only query on the database of the sync directory or tree at the
    /// playground's root, each column as text (empty when it cannot be read).
    func databaseRows(_ sql: String) -> [[String]] {
        var handle: OpaquePointer?
        guard sqlite3_open_v2(path + "/.basket-sync/state.db", &handle, SQLITE_OPEN_READONLY, nil) == SQLITE_OK else { return [] }
        defer { sqlite3_close(handle) }
        var statement: OpaquePointer?
        guard sqlite3_prepare_v2(handle, sql, -1, &statement, nil) == SQLITE_OK else { return [] }
        defer { sqlite3_finalize(statement) }
        var rows: [[String]] = []
        while sqlite3_step(statement) == SQLITE_ROW {
            rows.append((0..<sqlite3_column_count(statement)).map { column in
                sqlite3_column_text(statement, column).map { String(cString: $0) } ?? ""
            })
        }
        return rows
    }
}

extension Playground {
    /// The row of kept values of a cart (`cart`: its id in a tree; nil: a sync directory's own, 0).
    func keptValuesRow(cart: String? = nil, handle given: OpaquePointer? = nil) -> [UInt8]? {
        var handle = given
        if handle == nil, sqlite3_open_v2(path + "/.basket-sync/state.db", &handle, SQLITE_OPEN_READONLY, nil) != SQLITE_OK { return nil }
        defer { if given == nil { sqlite3_close(handle) } }
        var statement: OpaquePointer?
        let number = cart.map { "(SELECT n FROM carts WHERE id = '\($0)')" } ?? "0"
        guard sqlite3_prepare_v2(handle, "SELECT kept FROM kept WHERE cart = \(number)", -1, &statement, nil) == SQLITE_OK else { return nil }
        defer { sqlite3_finalize(statement) }
        guard sqlite3_step(statement) == SQLITE_ROW, let bytes = sqlite3_column_blob(statement, 0) else { return nil }
        return Array(UnsafeRawBufferPointer(start: bytes, count: Int(sqlite3_column_bytes(statement, 0))))
    }

    /// A cart's kept value `key` as text (see ``KeptValues``).
    func keptValue(_ key: String, cart: String? = nil) -> String? {
        keptValuesRow(cart: cart).flatMap { row in KeptValues.decode(row).first { $0.key == key }.map { String(decoding: $0.value, as: UTF8.self) } }
    }

    /// Sets a sync directory's kept value `key` (a database left as another run would leave it).
    func setKeptValue(_ key: String, _ value: String) -> Bool {
        var handle: OpaquePointer?
        guard sqlite3_open(path + "/.basket-sync/state.db", &handle) == SQLITE_OK else { return false }
        defer { sqlite3_close(handle) }
        guard let row = keptValuesRow(handle: handle) else { return false }
        var entries = KeptValues.decode(row).filter { $0.key != key }
        entries.append((key, Array(value.utf8)))
        return writeKeptValues(entries, handle: handle)
    }

    /// Writes cart 0's row of kept values.
    func writeKeptValues(_ entries: [(key: String, value: [UInt8])], handle: OpaquePointer?) -> Bool {
        var statement: OpaquePointer?
        guard sqlite3_prepare_v2(handle, "UPDATE kept SET kept = ? WHERE cart = 0", -1, &statement, nil) == SQLITE_OK else { return false }
        defer { sqlite3_finalize(statement) }
        let row = KeptValues.encode(entries)
        return row.withUnsafeBytes { bytes in
            sqlite3_bind_blob(statement, 1, bytes.baseAddress, Int32(bytes.count), nil) == SQLITE_OK && sqlite3_step(statement) == SQLITE_DONE
        } && sqlite3_changes(handle) == 1
    }
}
