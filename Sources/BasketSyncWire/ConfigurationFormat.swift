import BasketSync

/// How the agent writes its log lines on stderr.
public enum LogFormat: String, Sendable {
    /// One readable sentence per line.
    case human
    /// One JSON object per line.
    case json
}

/// The settings of a sync directory, from `basket-sync.json` (JSON with `//` comments).
public struct AgentConfiguration: Equatable, Sendable {
    /// How long a batch waits for the echo of a host that never writes `syncedThrough`.
    public var pendingTimeoutSeconds: Double = 10
    /// Whether the directory is one sync directory or a tree of carts (`"layout": "tree"`).
    public var isTree = false
    /// The host's cart, relative to the sync directory (its directory may be replaced whole).
    public var cart = "cart.json"
    /// The key names of the host's cart format.
    public var keys = CartKeys()
    /// Limits on input.
    public var limits = InputLimits()
    /// The log format.
    public var logFormat = LogFormat.human
    /// Whether a `cart.json` that is a symbolic link is followed.
    public var followSymlinks = false
    /// Rotation of the JSON Lines files, as logrotate's `create` mode; nil: never rotated.
    public var rotate: Rotation?

    /// When a JSON Lines file is rotated: past `maxBytes`, NAME becomes NAME.1 (NAME.1 becomes
    /// NAME.2 …, NAME.`keep` is dropped) and the next record starts a new NAME.
    public struct Rotation: Equatable, Sendable {
        /// The size past which the file is rotated after an append.
        public var maxBytes: Int
        /// How many rotated files are kept.
        public var keep: Int

        /// A rotation rule.
        public init(maxBytes: Int, keep: Int) {
            self.maxBytes = maxBytes
            self.keep = keep
        }
    }

    /// How long settled history is kept; nil: for ever.
    public var retention: Retention?

    /// How the agent learns of changes: inotify, polling, or chosen by the file system.
    public var watch = Watching()
    /// Where the agent writes its metrics for Prometheus (node_exporter's textfile format),
    /// relative to the sync directory or absolute; nil: none written.
    public var metrics: String?
    /// The directory that holds the database (and the locks and signal beside it), an absolute
    /// path on a local disk, for a sync directory on a network share; nil: `.basket-sync/` in the
    /// sync directory.
    public var database: String?

    /// How `watch` sees changes (docs/spec.md §10).
    public struct Watching: Equatable, Sendable {
        /// inotify where it sees every write, polling where it cannot (network and FUSE file
        /// systems); always inotify; always polling.
        public enum Mode: String, Equatable, Sendable { case auto, inotify, poll }

        /// The mode.
        public var mode: Mode = .auto
        /// How often a polled directory is looked at, in milliseconds.
        public var pollIntervalMs = 1000

        /// The shortest and longest poll interval accepted.
        public static let intervals = 10...3_600_000

        /// A watch setting.
        public init(mode: Mode = .auto, pollIntervalMs: Int = 1000) {
            self.mode = mode
            self.pollIntervalMs = pollIntervalMs
        }
    }

    /// What is removed once older than `days`: acknowledged records (never a pending batch nor a
    /// record the host has not acknowledged), the ids of events, transfers and orders, and the
    /// files of `inbox/cur/` and `inbox/bad/`.
    public struct Retention: Equatable, Sendable {
        /// The age, in days (fractional allowed), past which settled history is removed.
        public var days: Double

        /// A retention rule.
        public init(days: Double) { self.days = days }

        /// The age in seconds.
        public var seconds: Double { days * 86_400 }
    }

    /// The defaults.
    public init() {}

    /// The library's settings derived from these.
    package var syncConfiguration: SyncConfiguration {
        SyncConfiguration(pendingTimeout: .milliseconds(Int64((pendingTimeoutSeconds * 1000).rounded())), maxQuantity: limits.maxQuantity)
    }

    /// The name of the configuration file in a sync directory.
    public static let fileName = "basket-sync.json"

    /// The largest configuration file read.
    package static let maximumFileBytes = 1024 * 1024

    /// Whether a path inside the sync directory (or a tree's cart), as its components, names one
    /// of basket-sync's own files or folders, or lies inside one: its settings, the JSON Lines
    /// files and their rotated parts (`outbox.jsonl.1`, …), `.basket-sync/`, `inbox/`, and any
    /// name starting with `.basket-sync` (a tree cart's marker).
    package static func isOwn(_ components: [Substring]) -> Bool {
        guard let first = components.first else { return false }
        if first == ".basket-sync" || first == "inbox" || components.contains(where: { $0.hasPrefix(".basket-sync") }) { return true }
        guard components.count == 1 else { return false }
        if first == "basket-sync.json" { return true }
        return ["outbox.jsonl", "notifications.jsonl", "payments.jsonl"].contains { name in
            guard first.hasPrefix(name) else { return false }
            let rest = first.dropFirst(name.count)
            return rest.isEmpty || rest.first == "." && rest.count > 1 && rest.dropFirst().allSatisfy { $0.isASCII && $0.isNumber }
        }
    }
    /// Where a configuration is read, to judge the absolute paths it gives: the sync directory (a
    /// tree's root), and how a path is resolved through the links that exist.
    package struct Place {
        /// The sync directory or tree root.
        package let directory: String
        /// A path's real path, as far as it exists (the rest kept as written).
        package let resolve: (String) -> String
        /// What a path is (its device and inode), nil when it does not exist.
        package let identity: (String) -> [UInt64]?
        /// A place for `directory` with `resolve` and `identity`.
        package init(directory: String, resolve: @escaping (String) -> String, identity: @escaping (String) -> [UInt64]? = { _ in nil }) {
            self.directory = directory
            self.resolve = resolve
            self.identity = identity
        }

        /// The components of `path` below the directory, if it is the directory or lies inside
        /// it: by its real path, or by what its folders are — a folder on its way that is the
        /// directory itself under another name (a bind mount of it) puts it inside too.
        package func inside(_ path: String) -> [Substring]? {
            let real = resolve(path), directory = resolve(directory)
            if real == directory { return [] }
            let prefix = directory == "/" ? "/" : directory + "/"
            if real.hasPrefix(prefix) { return real.dropFirst(prefix.count).split(separator: "/") }
            guard let target = identity(directory) else { return nil }
            let components = real.split(separator: "/")
            for count in stride(from: components.count, through: 1, by: -1) {
                if identity("/" + components.prefix(count).joined(separator: "/")) == target { return Array(components.dropFirst(count)) }
            }
            return nil
        }
    }

    /// Whether a file at `components` below the sync directory (a tree's root) would be one of
    /// basket-sync's own files or folders, or the cart: in a tree, also inside a cart's.
    package static func isOwnOrCart(_ components: [Substring], cart: String, tree: Bool) -> Bool {
        let cart = cart.split(separator: "/")
        if isOwn(components) || components == cart { return true }
        guard tree, components.count > 1 else { return false }
        let inCart = Array(components.dropFirst())
        return isOwn(inCart) || inCart == cart
    }

    /// Parses a `basket-sync.json` (JSON with `//` comments); a problem names its place. With
    /// `place`, an absolute "metrics" or "database" is judged by where it lies in the directory.
    package static func parse(_ bytes: [UInt8], in place: Place? = nil) throws(JSONProblem) -> AgentConfiguration {
        func fail(_ offset: Int, _ reason: String) -> JSONProblem { JSONProblem(offset: offset, reason: reason) }
        let root = try JSONParser.parse(bytes, allowComments: true)
        guard case let .object(members) = root.value else { throw fail(root.offset, "the configuration must be an object") }
        var configuration = AgentConfiguration()

        func string(_ node: JSONNode, _ name: String) throws(JSONProblem) -> String {
            guard case let .string(text) = node.value, !text.isEmpty else { throw fail(node.offset, "\"\(name)\" must be a non-empty string") }
            return text
        }
        func positive(_ node: JSONNode, _ name: String) throws(JSONProblem) -> Int {
            guard let value = node.integer, value > 0 else { throw fail(node.offset, "\"\(name)\" must be a whole number above 0") }
            return value
        }

        var metricsOffset = root.offset
        var databaseOffset = root.offset
        for (key, node) in members {
            switch key {
            case "pendingTimeoutSeconds":
                guard case let .number(text) = node.value, let seconds = Double(text), seconds > 0, seconds <= 86_400 * 365 else {
                    throw fail(node.offset, "\"pendingTimeoutSeconds\" must be a number of seconds above 0 and at most 31536000 (a year; fractions allowed), such as 10")
                }
                configuration.pendingTimeoutSeconds = seconds
            case "layout":
                switch try string(node, key) {
                case "directory": configuration.isTree = false
                case "tree": configuration.isTree = true
                default: throw fail(node.offset, "\"layout\" must be \"directory\" (one cart) or \"tree\" (a cart per subdirectory)")
                }
            case "cart":
                let cart = try string(node, key)
                let components = cart.split(separator: "/", omittingEmptySubsequences: false)
                guard !cart.hasPrefix("/"), !components.contains(where: { $0 == ".." || $0 == "." || $0.isEmpty }) else {
                    throw fail(node.offset, "\"cart\" must be a file path inside the sync directory, such as \"cart.json\"")
                }
                // basket-sync's own files are not the host's cart (apply would write over them).
                if Self.isOwn(components) {
                    throw fail(node.offset, "\"cart\" names one of basket-sync's own files or folders (\(JSONWriter.quoted(cart))); give the host's cart, such as \"cart.json\" or \"host/cart.json\"")
                }
                configuration.cart = cart
            case "keys":
                guard case let .object(names) = node.value else { throw fail(node.offset, "\"keys\" must be an object") }
                for (name, value) in names {
                    switch name {
                    case "products": configuration.keys.products = try string(value, "keys.products")
                    case "id": configuration.keys.id = try string(value, "keys.id")
                    case "quantity": configuration.keys.quantity = try string(value, "keys.quantity")
                    case "syncedThrough": configuration.keys.syncedThrough = try string(value, "keys.syncedThrough")
                    default: throw fail(value.offset, "unknown key \(JSONWriter.quoted("keys." + name)); the keys are products, id, quantity and syncedThrough")
                    }
                }
                let keys = configuration.keys
                if keys.products.isByteEqual(to: keys.syncedThrough) {
                    throw fail(node.offset, "\"keys\" names products and syncedThrough both \(JSONWriter.quoted(keys.products)); a cart needs two different keys for them")
                }
                if keys.id.isByteEqual(to: keys.quantity) {
                    throw fail(node.offset, "\"keys\" names id and quantity both \(JSONWriter.quoted(keys.id)); a line needs two different keys for them")
                }
            case "limits":
                guard case let .object(names) = node.value else { throw fail(node.offset, "\"limits\" must be an object") }
                for (name, value) in names {
                    switch name {
                    case "maxFileBytes": configuration.limits.maxFileBytes = try positive(value, "limits.maxFileBytes")
                    case "maxQuantity":
                        configuration.limits.maxQuantity = try positive(value, "limits.maxQuantity")
                        guard configuration.limits.maxQuantity <= SyncConfiguration.largestMaxQuantity else {
                            throw fail(value.offset, "\"limits.maxQuantity\" must be at most 9007199254740991 (2^53 - 1: every JSON reader keeps it exact, and quantities added up past it are seen past it)")
                        }
                    case "maxIdBytes": configuration.limits.maxIdBytes = try positive(value, "limits.maxIdBytes")
                    default: throw fail(value.offset, "unknown key \(JSONWriter.quoted("limits." + name)); the limits are maxFileBytes, maxQuantity and maxIdBytes")
                    }
                }
            case "logFormat":
                guard let format = LogFormat(rawValue: try string(node, key)) else {
                    throw fail(node.offset, "\"logFormat\" must be \"human\" or \"json\"")
                }
                configuration.logFormat = format
            case "followSymlinks":
                guard case let .bool(value) = node.value else { throw fail(node.offset, "\"followSymlinks\" must be true or false") }
                configuration.followSymlinks = value
            case "rotate":
                if case .null = node.value {
                    configuration.rotate = nil
                    continue
                }
                guard case let .object(names) = node.value else { throw fail(node.offset, "\"rotate\" must be an object such as {\"maxBytes\": 67108864, \"keep\": 5}, or null") }
                var rotation = Rotation(maxBytes: 64 * 1024 * 1024, keep: 5)
                for (name, value) in names {
                    switch name {
                    case "maxBytes": rotation.maxBytes = try positive(value, "rotate.maxBytes")
                    case "keep":
                        rotation.keep = try positive(value, "rotate.keep")
                        guard rotation.keep <= 1000 else { throw fail(value.offset, "\"rotate.keep\" must be at most 1000") }
                    default: throw fail(value.offset, "unknown key \(JSONWriter.quoted("rotate." + name)); the keys are maxBytes and keep")
                    }
                }
                configuration.rotate = rotation
            case "retention":
                if case .null = node.value {
                    configuration.retention = nil
                    continue
                }
                guard case let .object(names) = node.value else { throw fail(node.offset, "\"retention\" must be an object such as {\"days\": 30}, or null") }
                var retention = Retention(days: 30)
                for (name, value) in names {
                    switch name {
                    case "days":
                        guard case let .number(text) = value.value, let days = Double(text), days > 0, days <= 36_500 else {
                            throw fail(value.offset, "\"retention.days\" must be a number of days above 0 and at most 36500 (fractions allowed), such as 30")
                        }
                        retention.days = days
                    default: throw fail(value.offset, "unknown key \(JSONWriter.quoted("retention." + name)); the key is days")
                    }
                }
                configuration.retention = retention
            case "watch":
                guard case let .object(names) = node.value else { throw fail(node.offset, "\"watch\" must be an object such as {\"mode\": \"auto\", \"pollIntervalMs\": 1000}") }
                for (name, value) in names {
                    switch name {
                    case "mode":
                        guard case let .string(text) = value.value, let mode = Watching.Mode(rawValue: text) else {
                            throw fail(value.offset, "\"watch.mode\" must be \"auto\" (inotify, or polling on network and FUSE file systems), \"inotify\" or \"poll\"")
                        }
                        configuration.watch.mode = mode
                    case "pollIntervalMs":
                        guard let interval = value.integer, Watching.intervals.contains(interval) else {
                            throw fail(value.offset, "\"watch.pollIntervalMs\" must be a whole number of milliseconds from \(Watching.intervals.lowerBound) to \(Watching.intervals.upperBound), such as 1000")
                        }
                        configuration.watch.pollIntervalMs = interval
                    default: throw fail(value.offset, "unknown key \(JSONWriter.quoted("watch." + name)); the keys are mode and pollIntervalMs")
                    }
                }
            case "metrics":
                if case .null = node.value {
                    configuration.metrics = nil
                } else {
                    let path = try string(node, key)
                    guard path.hasSuffix(".prom"), !path.split(separator: "/").contains("..") else {
                        throw fail(node.offset, "\"metrics\" must be a file path ending in .prom (node_exporter's textfile collector reads those), without .., such as \"/var/lib/prometheus/node-exporter/basket-sync.prom\", or null")
                    }
                    configuration.metrics = path
                    metricsOffset = node.offset
                }
            case "database":
                if case .null = node.value {
                    configuration.database = nil
                } else {
                    let path = try string(node, key)
                    let parts = path.split(separator: "/")
                    guard path.hasPrefix("/"), !parts.isEmpty, !parts.contains(".."), !parts.contains(".") else {
                        throw fail(node.offset, "\"database\" must be the absolute path of a directory on a local disk, without . or .., such as \"/var/lib/basket-sync/shop1\", or null (the database in .basket-sync/)")
                    }
                    configuration.database = "/" + parts.joined(separator: "/")
                    databaseOffset = node.offset
                }
            default:
                throw fail(node.offset, "unknown setting \(JSONWriter.quoted(key)); see the comments that basket-sync init writes")
            }
        }
        // The metrics file in the sync directory (relative, or an absolute path that lies there):
        // never one of basket-sync's own files or folders (written into inbox/new/, it would be
        // delivered as an event), nor the cart — in a tree, nor one of a cart's.
        if let metrics = configuration.metrics {
            let components = metrics.hasPrefix("/") ? place?.inside(metrics) : metrics.split(separator: "/").filter { $0 != "." }
            if let components, components.isEmpty || Self.isOwnOrCart(components, cart: configuration.cart, tree: configuration.isTree) {
                throw fail(metricsOffset, "\"metrics\" names the cart or one of basket-sync's own files or folders (\(JSONWriter.quoted(metrics))); give a file of its own, such as \"basket-sync.prom\" or an absolute path in node_exporter's textfile directory")
            }
        }
        // The database is basket-sync's alone: never inside the sync directory the host writes
        // (in its inbox it would be delivered as an event; in a tree's root, taken for a cart).
        if let database = configuration.database, let place, place.inside(database) != nil {
            throw fail(databaseOffset, "\"database\" lies inside the sync directory (\(JSONWriter.quoted(database)) is in \(place.resolve(place.directory))); give a directory outside it, basket-sync's alone, such as \"/var/lib/basket-sync/shop1\", or null (the database in .basket-sync/ here)")
        }
        // A directory named `.basket-sync` is another sync directory's (or tree's) own: its
        // database serves that directory, never a second one.
        if let database = configuration.database, database.hasSuffix("/.basket-sync") {
            throw fail(databaseOffset, "\"database\" names a .basket-sync/ directory (\(JSONWriter.quoted(database))): that is a sync directory's or a tree's own, whose database serves that directory alone; give a directory of this one's own, such as \"/var/lib/basket-sync/shop1\", or null (the database in .basket-sync/ here)")
        }
        return configuration
    }

    /// The file `basket-sync init` writes: every setting at its default, with what it does.
    public static let defaultFileText = AgentConfiguration().fileText

    /// A number as a person writes it: `10`, not `10.0`.
    package static func number(_ value: Double) -> String {
        value.rounded() == value && abs(value) < 1e15 ? String(Int64(value)) : String(value)
    }

    /// This configuration as a `basket-sync.json`: every setting, with a comment saying what it does.
    public var fileText: String {
        func quoted(_ text: String) -> String {
            var writer = JSONWriter()
            writer.string(text)
            return String(decoding: writer.bytes, as: UTF8.self)
        }
        let seconds = Self.number(pendingTimeoutSeconds)
        return """
            // basket-sync configuration. JSON with // comments; `basket-sync init` writes every setting at its default.
            // The agent reloads this file on SIGHUP.
            {
              // "directory": this directory is one cart's sync directory. "tree": every subdirectory
              // is a cart (basket-sync -C ROOT/ID …), and these settings are every cart's.
              "layout": \(isTree ? "\"tree\"" : "\"directory\""),

              // How long an updateBasket batch waits for the host's echo, in seconds, when the host
              // never writes "syncedThrough" in its cart. A host that writes it is waited for however long.
              "pendingTimeoutSeconds": \(seconds),

              // The host's cart, relative to this directory (in a tree: to each cart's directory).
              "cart": \(quoted(cart)),

              // The key names of the host's cart format, for hosts with their own: the list of lines,
              // a line's product id and quantity, and the highest outbox seq the host processed.
              "keys": { "products": \(quoted(keys.products)), "id": \(quoted(keys.id)), "quantity": \(quoted(keys.quantity)), "syncedThrough": \(quoted(keys.syncedThrough)) },

              // Limits on input: the largest file read (bytes), the largest quantity or delta on a
              // line, the longest id (UTF-8 bytes). Anything over is rejected with a clear error.
              "limits": { "maxFileBytes": \(limits.maxFileBytes), "maxQuantity": \(limits.maxQuantity), "maxIdBytes": \(limits.maxIdBytes) },

              // The log on stderr: "human" or "json" (one object per line).
              "logFormat": \(quoted(logFormat.rawValue)),

              // Whether a cart file that is a symbolic link is followed.
              "followSymlinks": \(followSymlinks),

              // Rotation of outbox.jsonl, notifications.jsonl and payments.jsonl: past maxBytes,
              // NAME becomes NAME.1 (NAME.1 becomes NAME.2 …, beyond keep dropped) and the next
              // record starts a new NAME. null: never; or {"maxBytes": 67108864, "keep": 5}.
              "rotate": \(rotate.map { "{ \"maxBytes\": \($0.maxBytes), \"keep\": \($0.keep) }" } ?? "null"),

              // How long settled history is kept: acknowledged records, the ids of events, transfers
              // and orders (one redelivered later is taken again), and the files of inbox/cur/ and
              // inbox/bad/. Never a pending batch nor a record the host has not acknowledged.
              // null: for ever; or {"days": 30} (fractions allowed).
              "retention": \(retention.map { "{ \"days\": \(Self.number($0.days)) }" } ?? "null"),

              // How the agent sees changes: "inotify"; "poll" (looks every pollIntervalMs: the cart,
              // inbox/new/, the commits); "auto": inotify, but polling where inotify cannot see
              // other machines' writes (NFS, SMB/CIFS, FUSE, 9p, Ceph…). watch --poll[=MS] forces polling.
              "watch": { "mode": \(quoted(watch.mode.rawValue)), "pollIntervalMs": \(watch.pollIntervalMs) },

              // Metrics for Prometheus: the agent writes them in node_exporter's textfile format
              // (replaced whole, atomically) after passes (at most every 5 s) and with its heartbeat.
              // null: none; or a path ending in .prom, such as "/var/lib/prometheus/node-exporter/basket-sync.prom".
              "metrics": \(metrics.map(quoted) ?? "null"),

              // Where the database lives. null: in .basket-sync/ here. A sync directory on a network
              // share keeps it on a local disk: SQLite's write-ahead log needs shared memory that a
              // network file system does not give. An absolute directory, basket-sync's alone (made
              // 0700), one per sync directory or tree, such as "/var/lib/basket-sync/shop1".
              "database": \(database.map(quoted) ?? "null")
            }

            """
    }
}
