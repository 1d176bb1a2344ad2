import BasketSync
import BasketSyncWire

extension Commands {
    /// Reads a products list (the cart format, with the configured keys) from a file, `-` for
    /// standard input, or the current cart when `file` is nil.
    static func products(_ file: String?, engine: SyncEngine) throws(AgentError) -> [RetailerProduct] {
        let path = file ?? engine.cartPath
        let bytes: [UInt8]
        if path == "-" {
            bytes = try Posix.readToEnd(0, path: "standard input", limit: engine.configuration.limits.maxFileBytes)
        } else {
            // A path given on the command line is the user's: a link is followed, a FIFO still refused.
            guard let read = try Posix.readFile(path, limit: engine.configuration.limits.maxFileBytes, follow: file != nil || engine.configuration.followSymlinks) else {
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
        let engine = try SyncEngine(directory: directory, isSynchronizerRegistered: true, logger: logger)
        // The files first: they hold what the database must hold, and a database that lost it
        // (restored, its WAL deleted) is found here (74) before anything more is written.
        try engine.publishAll()
        if let orderId { try checkIdentifier(orderId, "payment-started: the order id", limits: engine.configuration.limits) }
        var products: [RetailerProduct]?
        // The products are the cart's: the cart is taken first, so that the payment counts what it acknowledges.
        if productsFile == nil { _ = try? engine.takeCart() }
        do { products = try Commands.products(productsFile, engine: engine) } catch {
            logger.log(.warning, "\(error.description); the payment is recorded as skipped")
        }
        let summary = try engine.step { (machine, now) throws(AgentError) in
            machine.paymentStarted(totalPrice: total, productList: products, orderId: orderId, at: now)
        }
        engine.signalCommit()
        // paymentStarted always records (recorded or skipped): the machine's contract.
        return summary.payment!
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
        let engine = try SyncEngine(directory: directory, isSynchronizerRegistered: true, logger: logger)
        // The files first: they hold what the database must hold, and a database that lost it
        // (restored, its WAL deleted) is found here (74) before anything more is written.
        try engine.publishAll()
        try checkIdentifier(orderId, "handle-payment: the order id", limits: engine.configuration.limits)
        // The products are the cart's: the cart is taken first, so that the payment counts what it acknowledges.
        if productsFile == nil { _ = try? engine.takeCart() }
        let products = try Commands.products(productsFile, engine: engine)
        let summary = try engine.step { (machine, now) throws(AgentError) in
            do throws(PaymentError) {
                return try machine.handlePayment(totalPrice: total, productList: products, orderId: orderId, at: now)
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
        }
        engine.signalCommit()
        // handlePayment either records or says the order was recorded before: the machine's contract.
        if let repeated = summary.alreadyRecorded { return .alreadyRecorded(orderId: repeated.orderId, seq: repeated.seq) }
        return .recorded(summary.payment!)
    }

    /// Runs a completion (`handle-payment --then CMD ARG…`) as an argv, without a shell, and
    /// returns its exit status (128 + the signal when killed by one).
    public static func runCompletion(_ argv: [String]) throws(AgentError) -> Int32 {
        do { return try Posix.spawnAndWait(argv) } catch {
            guard error.operation == "run" else { throw .system(error) }
            throw .missingInput("cannot run the completion \(argv[0]): \(error.reason); give a command on the PATH or a path to one")
        }
    }

    /// A payment record as printed by the payment commands: its JSON line.
    public static func describe(_ record: PaymentRecord) -> String {
        String(decoding: RecordFormat.line(record).dropLast(), as: UTF8.self)
    }
}
