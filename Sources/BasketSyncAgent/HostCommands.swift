import BasketSync
import BasketSyncWire
import Glibc

extension Commands {
    // MARK: apply

    /// What `apply` did.
    public struct ApplySummary: Equatable {
        /// The seqs of the `updateBasket` records applied.
        public var applied: [UInt64] = []
        /// The seqs of the `redirectToCart` records seen.
        public var redirects: [UInt64] = []
        /// The cart's `syncedThrough` before.
        public var syncedThroughBefore: UInt64 = 0
        /// The cart's `syncedThrough` after.
        public var syncedThrough: UInt64 = 0
    }

    /// `apply`: the reference host. Applies the outbox records after the cart's `syncedThrough`
    /// in seq order (clamping each line at 0), keeps every other line and field as it is, and
    /// writes the cart atomically with the new `syncedThrough`. Serialized with other `apply`
    /// runs by a lock; safe beside a running agent (which takes the new cart on its rename).
    public static func apply(directory: String, logger: Logger) throws(AgentError) -> ApplySummary {
        let engine = try SyncEngine(directory: directory, registered: true, logger: logger)
        let configuration = engine.configuration
        let lockPath = "\(engine.store.stateDirectory)/apply.lock"
        let lock: Int32
        do { lock = try Posix.open(lockPath, O_RDWR | O_CREAT, mode: 0o600) } catch { throw .system(error) }
        defer { Posix.close(lock) }
        _ = Posix.retrying { flock(lock, LOCK_EX) }

        // The outbox file is what a host reads: make sure it holds every committed record.
        try engine.publish(.outbox)

        let cartPath = engine.cartPath
        let bytes = try Posix.readFile(cartPath, limit: configuration.limits.maxFileBytes) ?? Array("[]".utf8)
        var document: CartDocument
        do { document = try CartDocument(bytes, keys: configuration.keys, limits: configuration.limits) } catch {
            throw error.badData(path: cartPath, bytes: bytes)
        }
        var summary = ApplySummary()
        summary.syncedThroughBefore = document.cart.syncedThrough ?? 0
        summary.syncedThrough = summary.syncedThroughBefore

        let records = try outboxRecords(engine.store.lines(.outbox, after: summary.syncedThroughBefore),
                                        path: "\(directory)/\(Projection.outbox.fileName)", after: summary.syncedThroughBefore)
        guard !records.isEmpty else { return summary }
        for record in records {
            switch record.type {
            case .updateBasket:
                for delta in record.products { document.apply(delta) }
                summary.applied.append(record.seq)
            case .redirectToCart:
                summary.redirects.append(record.seq)
            }
            summary.syncedThrough = record.seq
        }
        document.setSyncedThrough(summary.syncedThrough)
        do { try Posix.writeFileAtomically(cartPath, document.encoded()) } catch {
            throw .system(error)
        }
        return summary
    }

    /// The outbox records after `seq`, from their lines (the database's, which the file holds
    /// too once published): read by seq through the index, not by scanning the whole file.
    static func outboxRecords(_ lines: [(seq: UInt64, line: [UInt8])], path: String, after seq: UInt64) throws(AgentError) -> [OutboxRecord] {
        var records: [OutboxRecord] = []
        for (recordSeq, bytes) in lines {
            let record: OutboxRecord
            do { record = try RecordFormat.outboxRecord(bytes) } catch {
                throw .database(path: path, message: "outbox record \(recordSeq) cannot be read (\(error.reason)); restore .basket-sync/ from a backup")
            }
            let expected = (records.last?.seq ?? seq) + 1
            guard recordSeq == expected, record.seq == recordSeq else {
                throw .database(path: path, message: "outbox seq \(recordSeq) where \(expected) was expected; restore .basket-sync/ from a backup")
            }
            records.append(record)
        }
        return records
    }

    // MARK: store and payments

    /// `set-store`: `setSelectedStoreWithExternalId`, and the mode when given; kept in the state.
    public static func setStore(directory: String, externalId: String, mode: SyncMode?, logger: Logger) throws(AgentError) -> SyncState {
        let engine = try SyncEngine(directory: directory, registered: true, logger: logger)
        try engine.step { (machine, now) throws(AgentError) in
            machine.setSelectedStore(externalId: externalId, mode: mode, at: now)
        }
        engine.signalCommit()
        return try engine.currentState()
    }

    /// Reads a products list (the cart format, with the configured keys) from a file, `-` for
    /// standard input, or the current cart when `file` is nil.
    static func products(_ file: String?, engine: SyncEngine) throws(AgentError) -> [RetailerProduct] {
        let path = file ?? engine.cartPath
        let bytes: [UInt8]
        if path == "-" {
            bytes = try Posix.readAll(fd: 0, path: "standard input", limit: engine.configuration.limits.maxFileBytes)
        } else {
            guard let read = try Posix.readFile(path, limit: engine.configuration.limits.maxFileBytes) else {
                throw .missingInput("\(path): no such file; give the products bought with --products FILE (or - for standard input)")
            }
            bytes = read
        }
        return try engine.decodeCart(bytes, path: path == "-" ? "standard input" : path).products
    }

    /// `payment-started`: best-effort. Whatever is missing gives a `skipped` record with a reason;
    /// products that cannot be read are recorded as `invalidProducts`. Never fails for that.
    public static func paymentStarted(
        directory: String, total: Money, orderId: String?, productsFile: String?, logger: Logger
    ) throws(AgentError) -> PaymentRecord {
        let engine = try SyncEngine(directory: directory, registered: true, logger: logger)
        var products: [RetailerProduct]?
        do { products = try Commands.products(productsFile, engine: engine) } catch {
            logger.log(.warning, "\(error.description); the payment is recorded as skipped")
        }
        var record: PaymentRecord?
        try engine.step { (machine, now) throws(AgentError) in
            let effects = machine.paymentStarted(totalPrice: total, productList: products, orderId: orderId, at: now)
            for case let .payment(payment) in effects { record = payment }
            return effects
        }
        engine.signalCommit()
        return record!
    }

    /// How `handle-payment` ended.
    public enum HandlePaymentOutcome: Equatable {
        /// Recorded now (status recorded or skipped), durable before this returns.
        case recorded(PaymentRecord)
        /// The order was recorded before, as payment `seq`: not recorded again.
        case alreadyRecorded(orderId: String, seq: UInt64)
    }

    /// `handle-payment`: records the payment once per order id and closes the Mealz basket. Fails,
    /// recording nothing, without retailer mode or a store, or with products that cannot be read.
    public static func handlePayment(
        directory: String, total: Money, orderId: String, productsFile: String?, logger: Logger
    ) throws(AgentError) -> HandlePaymentOutcome {
        let engine = try SyncEngine(directory: directory, registered: true, logger: logger)
        let products = try Commands.products(productsFile, engine: engine)
        var outcome: HandlePaymentOutcome?
        try engine.step { (machine, now) throws(AgentError) in
            let effects: [SyncEffect]
            do throws(PaymentError) {
                effects = try machine.handlePayment(totalPrice: total, productList: products, orderId: orderId, at: now)
            } catch {
                switch error {
                case .notRetailerMode, .noStore:
                    throw AgentError.notReady("\(directory): \(error.description)")
                case .emptyOrderId:
                    throw AgentError.usage("handle-payment: \(error.description)")
                case .invalidProducts:
                    throw AgentError.badData(path: productsFile ?? engine.cartPath, line: 1, column: 1, reason: error.description)
                }
            }
            for effect in effects {
                switch effect {
                case let .payment(record): outcome = .recorded(record)
                case let .paymentAlreadyRecorded(orderId, seq): outcome = .alreadyRecorded(orderId: orderId, seq: seq)
                default: break
                }
            }
            return effects
        }
        engine.signalCommit()
        return outcome!
    }

    // MARK: validate

    /// What `validate` checks a file as.
    public enum FileKind: String, Sendable {
        /// A host cart (with the sync directory's key names, when there is one).
        case cart
        /// A Mealz inbox event.
        case event
        /// A `basket-sync.json`.
        case config
    }

    /// The kind a file most likely is, from its name and place.
    public static func guessKind(of path: String) -> FileKind {
        if Posix.basename(of: path) == AgentConfiguration.fileName { return .config }
        if path.contains("/inbox/") || path.hasPrefix("inbox/") { return .event }
        return .cart
    }

    /// `validate`: every problem of a file as `path:line:column: reason`; empty when valid.
    public static func validate(path: String, kind: FileKind, directory: String) throws(AgentError) -> [String] {
        let configuration = (try? AgentConfiguration.load(directory: directory)) ?? AgentConfiguration()
        let bytes: [UInt8]
        if path == "-" {
            bytes = try Posix.readAll(fd: 0, path: "standard input", limit: configuration.limits.maxFileBytes)
        } else {
            do throws(AgentError) {
                guard let read = try Posix.readFile(path, limit: configuration.limits.maxFileBytes) else {
                    throw AgentError.missingInput("\(path): no such file; check the path")
                }
                bytes = read
            } catch {
                if case .tooLarge = error { return [error.description] }
                throw error
            }
        }
        let shown = path == "-" ? "standard input" : path
        if kind == .config {
            do { _ = try AgentConfiguration.parse(bytes, path: shown) } catch { return [error.description] }
            return []
        }
        do throws(DecodingFailure) {
            if kind == .cart {
                _ = try CartFormat.decode(bytes, keys: configuration.keys, limits: configuration.limits)
            } else {
                _ = try EventFormat.decode(bytes, limits: configuration.limits)
            }
            return []
        } catch {
            return error.descriptions(path: shown, bytes: bytes)
        }
    }
}

extension Posix {
    /// Reads a file descriptor to its end, refusing more than `limit` bytes.
    static func readAll(fd: Int32, path: String, limit: Int) throws(AgentError) -> [UInt8] {
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65_536)
        while true {
            let count = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if count < 0 {
                if errno == EINTR { continue }
                throw .system(SystemError(operation: "read", path: path, code: errno))
            }
            if count == 0 { return bytes }
            bytes.append(contentsOf: chunk[0..<count])
            if bytes.count > limit { throw .tooLarge(path: path, size: bytes.count, limit: limit) }
        }
    }
}

extension Commands {
    /// Runs a completion as an argv, without a shell (nothing in data is ever executed), and
    /// returns its exit status (128 + the signal when killed by one).
    public static func runCompletion(_ argv: [String]) throws(AgentError) -> Int32 {
        var pid = pid_t()
        var cStrings: [UnsafeMutablePointer<CChar>?] = argv.map { strdup($0) } + [nil]
        defer { for pointer in cStrings { free(pointer) } }
        let spawned = posix_spawnp(&pid, argv[0], nil, nil, &cStrings, environ)
        guard spawned == 0 else {
            throw .missingInput("cannot run the completion \(argv[0]): \(String(cString: strerror(spawned))); give a command on the PATH or a path to one")
        }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 {
            if errno != EINTR { throw .system(SystemError(operation: "waitpid", path: argv[0], code: errno)) }
        }
        let signal = status & 0x7F
        return signal == 0 ? (status >> 8) & 0xFF : 128 + signal
    }
}

extension Commands {
    /// A payment record as printed by the payment commands: its JSON line.
    public static func describe(_ record: PaymentRecord) -> String {
        String(decoding: RecordFormat.line(record).dropLast(), as: UTF8.self)
    }
}
