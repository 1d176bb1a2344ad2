import BasketSync
import BasketSyncWire

/// The database's tables: one list, from which the layout is made, an older one converted, and a
/// cart's rows removed.
enum Table: String, CaseIterable {
    case meta, outbox, notifications, payments, inbox, reports, completions, orders, transfers, unfinished
    /// The inbox's files filed away in `cur/` or `bad/`, for retention (the name older layouts gave it).
    case settled
    case pending, carts
    /// Each cart's small values in one row (``MetaImage``): a table of its own whose rows hold up
    /// to about 4 KiB in their page (a `WITHOUT ROWID` row spills past about 1 KiB).
    case kept

    /// Its columns in layout 3: each row belongs to a cart (`carts` numbers them).
    var definition: String {
        switch self {
        case .meta: return "cart INTEGER NOT NULL, key TEXT NOT NULL, value BLOB NOT NULL, PRIMARY KEY(cart, key)"
        case .outbox, .notifications, .payments: return "cart INTEGER NOT NULL, seq INTEGER NOT NULL, line BLOB NOT NULL, PRIMARY KEY(cart, seq)"
        case .inbox: return "cart INTEGER NOT NULL, id TEXT NOT NULL, file TEXT NOT NULL, outcome TEXT NOT NULL, at TEXT NOT NULL, PRIMARY KEY(cart, id)"
        case .reports: return "n INTEGER PRIMARY KEY, cart INTEGER NOT NULL, at TEXT NOT NULL, level TEXT NOT NULL, message TEXT NOT NULL"
        case .completions: return "cart INTEGER NOT NULL, order_id TEXT NOT NULL, payment INTEGER NOT NULL, at TEXT NOT NULL, PRIMARY KEY(cart, order_id)"
        case .orders: return "cart INTEGER NOT NULL, id TEXT NOT NULL, seq INTEGER NOT NULL, at TEXT NOT NULL, PRIMARY KEY(cart, id)"
        case .transfers: return "cart INTEGER NOT NULL, id TEXT NOT NULL, at TEXT NOT NULL, PRIMARY KEY(cart, id)"
        case .unfinished: return "cart INTEGER NOT NULL, order_id TEXT NOT NULL, at TEXT NOT NULL, PRIMARY KEY(cart, order_id)"
        case .settled: return "cart INTEGER NOT NULL, folder TEXT NOT NULL, name TEXT NOT NULL, at TEXT NOT NULL, PRIMARY KEY(cart, folder, name)"
        case .pending: return "cart INTEGER NOT NULL, seq INTEGER NOT NULL, batch BLOB NOT NULL, PRIMARY KEY(cart, seq)"
        case .carts: return "n INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE, sync_id TEXT NOT NULL, made TEXT NOT NULL"
        case .kept: return "cart INTEGER PRIMARY KEY, kept BLOB NOT NULL"
        }
    }

    /// One B-tree updated in place (`WITHOUT ROWID`): the tables written at every step.
    var withoutRowId: Bool { self == .meta || self == .settled }

    /// Whether its rows belong to one cart (every table but `carts`, which numbers them).
    var holdsCartRows: Bool { self != .carts }

    /// Its columns in layouts 1 and 2 (one sync directory, no cart column); nil for the tables
    /// those layouts did not have.
    var columnsBeforeCarts: String? {
        switch self {
        case .meta: return "key, value"
        case .outbox, .notifications, .payments: return "seq, line"
        case .inbox: return "id, file, outcome, at"
        case .reports: return "n, at, level, message"
        case .completions: return "order_id, payment, at"
        case .orders: return "id, seq, at"
        case .transfers: return "id, at"
        case .unfinished: return "order_id, at"
        case .settled: return "folder, name, at"
        case .pending, .carts, .kept: return nil
        }
    }

    /// The indexes of layout 3, by what retention and `status` look up.
    static let indexes = [
        "reports_cart ON reports(cart, n)", "inbox_at ON inbox(cart, at)", "orders_at ON orders(cart, at)",
        "transfers_at ON transfers(cart, at)", "settled_at ON settled(cart, at)",
    ]
}

extension Database {
    /// What a read-only open says of a database of an older layout (it cannot convert it).
    static let olderLayout = "written by an older basket-sync"

    /// The configuration error of a layout that does not match the database, at `"layout"`.
    static func layoutMismatch(_ directory: String, _ reason: String) -> AgentError {
        AgentConfiguration.settingError(directory: directory, setting: "layout", reason: reason)
    }

    /// Every table and index of layout 3, as ``Table`` lists them.
    static var tables: String {
        (Table.allCases.map { "CREATE TABLE IF NOT EXISTS \($0.rawValue)(\($0.definition))\($0.withoutRowId ? " WITHOUT ROWID" : "")" }
            + Table.indexes.map { "CREATE INDEX IF NOT EXISTS \($0)" }).joined(separator: ";\n") + ";"
    }

    /// The tables of layouts 1 and 2, as that version made them (those it did not have yet are
    /// made empty, to be converted like the others).
    static let tablesBeforeCarts = """
        CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value BLOB NOT NULL) WITHOUT ROWID;
        CREATE TABLE IF NOT EXISTS outbox(seq INTEGER PRIMARY KEY, line BLOB NOT NULL);
        CREATE TABLE IF NOT EXISTS notifications(seq INTEGER PRIMARY KEY, line BLOB NOT NULL);
        CREATE TABLE IF NOT EXISTS payments(seq INTEGER PRIMARY KEY, line BLOB NOT NULL);
        CREATE TABLE IF NOT EXISTS inbox(id TEXT PRIMARY KEY, file TEXT NOT NULL, outcome TEXT NOT NULL, at TEXT NOT NULL);
        CREATE TABLE IF NOT EXISTS reports(n INTEGER PRIMARY KEY, at TEXT NOT NULL, level TEXT NOT NULL, message TEXT NOT NULL);
        CREATE TABLE IF NOT EXISTS completions(order_id TEXT PRIMARY KEY, payment INTEGER NOT NULL, at TEXT NOT NULL);
        CREATE TABLE IF NOT EXISTS orders(id TEXT PRIMARY KEY, seq INTEGER NOT NULL, at TEXT NOT NULL);
        CREATE TABLE IF NOT EXISTS transfers(id TEXT PRIMARY KEY, at TEXT NOT NULL);
        CREATE TABLE IF NOT EXISTS unfinished(order_id TEXT PRIMARY KEY, at TEXT NOT NULL);
        CREATE TABLE IF NOT EXISTS settled(folder TEXT NOT NULL, name TEXT NOT NULL, at TEXT NOT NULL, PRIMARY KEY(folder, name)) WITHOUT ROWID;
        """

    /// Layouts 1 and 2 (one sync directory) become layout 3: every row goes to cart 0, once, in
    /// the caller's transaction. The state's own conversion (1 to 2) follows in ``Store``.
    func convertToCartRows() throws(AgentError) {
        try connection.execute(Database.tablesBeforeCarts)
        let columns = Table.allCases.compactMap { table in table.columnsBeforeCarts.map { (table: table.rawValue, columns: $0) } }
        for (table, _) in columns { try connection.execute("ALTER TABLE \(table) RENAME TO \(table)_before_carts") }
        // The old indexes keep their names on the renamed tables: they go with them.
        for index in ["inbox_at", "orders_at", "transfers_at", "settled_at"] { try connection.execute("DROP INDEX IF EXISTS \(index)") }
        try connection.execute(Database.tables)
        for (table, names) in columns {
            try connection.execute("INSERT INTO \(table)(cart, \(names)) SELECT 0, \(names) FROM \(table)_before_carts; DROP TABLE \(table)_before_carts")
        }
        // Marks the rows converted; Store brings the state itself up (layout 1 kept ids in it).
        let layout = try connection.scalar("PRAGMA user_version") ?? 0
        try connection.execute("INSERT INTO meta(cart, key, value) VALUES(0, 'layoutBeforeCarts', CAST('\(layout)' AS BLOB))")
        try connection.execute("PRAGMA user_version=\(Database.schemaVersion)")
    }
}
