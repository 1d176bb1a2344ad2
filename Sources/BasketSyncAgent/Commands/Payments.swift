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
            // A path given on the command line is read as `validate` reads it: in the sync
            // directory as basket-sync reads a file there (never through a link another account
            // planted), elsewhere as the user's own (its link followed); a FIFO refused either way.
            let read: [UInt8]?
            do throws(AgentError) {
                if file != nil {
                    read = try Commands.readNamedFile(path, place: Commands.placeInDirectory(path, directory: engine.directory), kind: .cart, configuration: engine.configuration)
                } else {
                    // The cart is read as every reader of it reads it (its links checked, if
                    // followed); with other names, rejected as sync rejects it.
                    let found = try CartReader.readCart(path, configuration: engine.configuration)
                    try CartReader.refuseHardLink(found?.info, path: path, followSymlinks: engine.configuration.followSymlinks)
                    read = found?.bytes
                }
            } catch {
                // Not a regular file (a directory, a FIFO, a link): a rejected products list, 65 as sync's rejected cart.
                if case let .system(failure) = error, failure.isNotRegular {
                    // A file given on the command line is not the sync directory's: said as such.
                    let reason = file != nil && failure.refusal == nil ? failure.shape.map { "is \($0), not a regular file; --products reads a regular file (or standard input, -)" } : nil
                    throw .badData(path: path, line: 1, column: 1, reason: reason ?? failure.shapeReason ?? failure.description)
                }
                throw error
            }
            guard let read else {
                throw .missingInput("\(path): no such file; give the products bought with --products FILE (or - for standard input); with -C, a relative FILE is relative to the sync directory (as with git -C)")
            }
            bytes = read
        }
        return try engine.decodeCart(bytes, path: path == "-" ? "standard input" : path).products
    }

    /// What a payment command did: the record it made, or the earlier record of the same order.
    public struct PaymentOutcome: Equatable {
        /// How the completion (`handle-payment --then`) went.
        public enum Completion: Equatable {
            /// No completion was given.
            case none
            /// It ran and exited with this status (0: recorded as finished, never run again).
            case ran(status: Int32)
            /// It finished successfully before, at this time: not run again.
            case finishedBefore(at: String)
            /// It could not be started (no such program, not executable): the payment stays
            /// recorded, and a retry runs it.
            case couldNotStart(reason: String)
            /// Its supervisor was killed and how the completion ended is not known (it may not
            /// have started): the payment stays recorded, and a retry runs it.
            case lost(reason: String)
        }

        /// The record made now, or for a duplicate the one recorded before (nil when the
        /// database no longer holds its line).
        public var record: PaymentRecord?
        /// The order was recorded before: nothing was recorded now.
        public var duplicate: Bool
        /// The order id, and the seq of its payment.
        public var orderId: String?
        /// The payment's seq in payments.jsonl.
        public var seq: UInt64
        /// How the completion went.
        public var completion: Completion = .none

        /// The human output: the record's JSON line when new; a sentence for a duplicate.
        public var human: String {
            var lines: [String] = []
            if duplicate {
                lines.append("order \(orderId ?? "") was already recorded as payment #\(seq); not recorded again (a duplicate)")
            } else if let record {
                lines.append(Commands.describe(record))
            }
            switch completion {
            case let .finishedBefore(at):
                lines.append("its completion finished at \(at): not run again (it may clear a cart filled since)")
            case let .ran(status) where duplicate:
                lines.append("its completion had never exited 0: run again, exit status \(status)")
            case let .couldNotStart(reason):
                lines.append("its completion could not be started: \(reason)")
            case let .lost(reason):
                lines.append("its completion's end is not known: \(reason)")
            default:
                break
            }
            return lines.joined(separator: "\n")
        }

        /// The JSON output: `{"duplicate":…,"seq":…,"payment":{record},"completion":…}`.
        public var json: String {
            var writer = JSONWriter()
            writer.object { object in
                object.member("duplicate", duplicate)
                object.member("seq", seq)
                object.member("payment") { writer in
                    if let record { writer.raw(text: String(decoding: RecordFormat.line(record).dropLast(), as: UTF8.self)) } else { writer.raw("null") }
                }
                object.member("completion") { writer in
                    switch completion {
                    case .none: writer.raw("null")
                    case let .ran(status):
                        writer.object { $0.member("ran", true); $0.member("status", Int(status)) }
                    case let .finishedBefore(at):
                        writer.object { $0.member("ran", false); $0.member("finishedAt", at) }
                    case let .couldNotStart(reason):
                        writer.object { $0.member("ran", false); $0.member("error", reason) }
                    case let .lost(reason):
                        // Whether it ran is not known: null, and why.
                        writer.object { $0.member("ran") { $0.raw("null") }; $0.member("error", reason) }
                    }
                }
            }
            return writer.text
        }
    }

    /// `payment-started`: best-effort. Whatever is missing gives a `skipped` record with a reason;
    /// products that cannot be read are recorded as `invalidProducts`. Never fails for that. An
    /// order already paid (`handle-payment`) records nothing: a duplicate.
    public static func paymentStarted(
        directory: String, total: Money, orderId: String?, productsFile: String?, logger: Logger
    ) throws(AgentError) -> PaymentOutcome {
        let engine = try SyncEngine(directory: directory, isSynchronizerRegistered: true, logger: logger)
        // The files first: they hold what the database must hold, and a database that lost it
        // (restored, its WAL deleted) is found here (74) before anything more is written.
        try engine.publishAll()
        if let orderId { try checkIdentifier(orderId, "payment-started: the order id", limits: engine.configuration.limits) }
        var products: [RetailerProduct]?
        // An order paid already is a duplicate before anything else: its products are not read
        // (nor said unreadable: nothing is recorded).
        let paid = try orderId.map { (orderId) throws(AgentError) in try engine.recordedPayment(orderId: orderId) } ?? nil
        if paid == nil {
            // The cart is taken first, so that the payment counts what it acknowledges — the
            // products given or the cart's, Mealz's share of them is what the cart on disk shows.
            _ = try? engine.takeCart()
            do { products = try Commands.products(productsFile, engine: engine) } catch {
                logger.log(.warning, "\(error.description); the payment is recorded as skipped")
            }
        }
        let summary = try engine.step(order: orderId) { (machine, now) throws(AgentError) in
            machine.paymentStarted(totalPrice: total, productList: products, orderId: orderId, at: now)
        }
        engine.signalCommit()
        if let repeated = summary.alreadyRecorded {
            return PaymentOutcome(record: try engine.paymentRecord(seq: repeated.seq), duplicate: true, orderId: repeated.orderId, seq: repeated.seq)
        }
        // paymentStarted records (recorded or skipped) whenever the order is not paid: the machine's contract.
        return PaymentOutcome(record: summary.payment!, duplicate: false, orderId: orderId, seq: summary.payment!.seq)
    }

    /// `handle-payment`: records the payment once per order id, closes the Mealz basket, and runs
    /// the completion `then` (an argv, no shell) until it succeeds once (docs/spec.md §4.7).
    ///
    /// A retry of an order recorded before is answered first, whatever changed since: refused
    /// (65) when its total, or the product list it gives, differs from the record; otherwise a
    /// duplicate, and its completion runs again only if it never exited 0. Payments and their
    /// completions are serialized by a lock, so two retries at once never both run it. Fails,
    /// recording nothing, without retailer mode or a store, or with products that cannot be read.
    ///
    /// `completionOutputToError`: the completion's standard output goes to standard error (with
    /// `--json`, standard output holds the JSON alone).
    public static func handlePayment(
        directory: String, total: Money, orderId: String, productsFile: String?, then: [String],
        completionOutputToError: Bool = false, logger: Logger
    ) throws(AgentError) -> PaymentOutcome {
        let engine = try SyncEngine(directory: directory, isSynchronizerRegistered: true, logger: logger)
        // The files first: they hold what the database must hold, and a database that lost it
        // (restored, its WAL deleted) is found here (74) before anything more is written.
        try engine.publishAll()
        try checkIdentifier(orderId, "handle-payment: the order id", limits: engine.configuration.limits)
        // This order's lock, held until the completion has run — by the completion itself, which
        // inherits it: killed, basket-sync does not let a second retry start another completion
        // while the first still runs. A retry waits, then finds it finished.
        let lock = try engine.store.lockOrder(orderId) {
            logger.log(.info, "another handle-payment of order \(JSONWriter.quoted(orderId)) is running (or its completion is): waiting for it")
        }
        defer { Posix.close(lock) }

        var outcome: PaymentOutcome
        if let seq = try engine.recordedPayment(orderId: orderId) {
            let earlier = try engine.paymentRecord(seq: seq)
            if let earlier {
                let given = try productsFile.map { (file) throws(AgentError) in try Commands.products(file, engine: engine) }
                if let difference = earlier.retryDifference(totalPrice: total, productList: given) {
                    throw .conflict("handle-payment: \(PaymentError.differentRetry(orderId: orderId, seq: seq, difference: difference).description)")
                }
            }
            // Counted (status shows duplicates), nothing recorded; the order's last activity.
            _ = try engine.step(order: orderId) { (machine, now) throws(AgentError) in
                (try? machine.handlePayment(totalPrice: total, productList: [], orderId: orderId, at: now)) ?? []
            }
            try engine.store.withTransaction { () throws(AgentError) in try engine.store.touchOrder(orderId, at: Date()) }
            outcome = PaymentOutcome(record: earlier, duplicate: true, orderId: orderId, seq: seq)
        } else {
            // The cart is taken first, so that the payment counts what it acknowledges — the
            // products given or the cart's, Mealz's share of them is what the cart on disk shows.
            _ = try? engine.takeCart()
            let products = try Commands.products(productsFile, engine: engine)
            let summary = try engine.step(order: orderId) { (machine, now) throws(AgentError) in
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
                    case .differentRetry:
                        throw AgentError.conflict("handle-payment: \(error.description)")
                    }
                }
            }
            engine.signalCommit()
            // A new order is recorded (or recorded as skipped): the machine's contract.
            let record = summary.payment!
            outcome = PaymentOutcome(record: record, duplicate: false, orderId: orderId, seq: record.seq)
        }
        guard !then.isEmpty else { return outcome }
        if let finished = try engine.store.withTransaction({ () throws(AgentError) in try engine.store.completionFinished(orderId: orderId) }) {
            outcome.completion = .finishedBefore(at: finished)
            return outcome
        }
        if let problem = Posix.whyNotRunnable(then[0]) {
            // The payment is recorded all the same (the money moved): said, and the retry runs it.
            outcome.completion = .couldNotStart(reason: "\(then[0]): \(problem); give a command on the PATH or a path to an executable file (with -C, a relative path is relative to the sync directory); the payment stays recorded, and a retry runs the completion")
            return outcome
        }
        try engine.store.withTransaction { () throws(AgentError) in try engine.store.markUnfinished(orderId: orderId, at: Date()) }
        // The completion runs under a supervisor (this program again) that records its outcome
        // when it exits: killed, handle-payment leaves it running, and a completion that exited 0
        // is never run again by a retry. The supervisor and the completion hold this order's lock.
        let supervisor = ["/proc/self/exe", Commands.completionSupervisor, directory, orderId, String(outcome.seq), "--"] + then
        // The other way round too: the supervisor killed alone, its completion is given to this
        // process (a subreaper), which waits for it and records its end. The supervisor tells the
        // completion's pid through a pipe (descriptor 4).
        _ = Posix.becomeSubreaper()
        let pipe: (read: Int32, write: Int32)
        do { pipe = try Posix.makePipe() } catch { throw .system(error) }
        defer { Posix.close(pipe.read) }
        var status: Int32
        var supervisorKilled = false
        do {
            status = try Posix.spawnAndWait(supervisor, passing: lock, alsoPassing: pipe.write, outputToError: completionOutputToError,
                                            signalsIgnored: true, started: { _ in Posix.close(pipe.write) },
                                            signaled: { supervisorKilled = $0 })
        } catch {
            throw .system(error)
        }
        let told = (try? Posix.readToEnd(pipe.read, path: "the supervisor's pipe", limit: 64)) ?? []
        // Killed before it could tell (the completion had only just started): the orphan given to
        // this process that started first is the completion (its own children came after it).
        // A supervisor that ended of itself reaped its completion and recorded its end.
        let completion = !supervisorKilled ? nil : Int32(String(decoding: told, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines))
            ?? (told.isEmpty ? Posix.orphansGiven().first : nil)
        let ended = completion.flatMap(Posix.waitFor)
        if supervisorKilled, ended == nil,
           try engine.store.withTransaction({ () throws(AgentError) in try engine.store.completionFinished(orderId: orderId) }) == nil {
            // Killed before it started the completion, or after it reaped one whose end it
            // could not record: not known; the retry runs it.
            outcome.completion = .lost(reason: "its supervisor was killed (status \(status)) and the completion (\(completion.map { "pid \($0)" } ?? "not found among this process's children: it may never have started")) could not be waited for; the payment stays recorded, and a retry of handle-payment runs the completion")
            return outcome
        }
        if let ended {
            // Its supervisor is gone and did not reap it: its end is recorded here.
            status = ended
            if let failure = recordCompletionEnd(ended, store: engine.store, orderId: orderId, seq: outcome.seq, logger: logger) { throw failure }
        }
        outcome.completion = .ran(status: status)
        if status == 0, try engine.store.withTransaction({ () throws(AgentError) in try engine.store.completionFinished(orderId: orderId) }) == nil {
            throw .database(path: engine.store.databasePath, message: "the completion \(then[0]) exited 0 but its end could not be recorded (see the message above); a retry of handle-payment runs it again")
        }
        return outcome
    }

    /// The hidden command under which `handle-payment` runs its completion: `basket-sync
    /// <this> DIR ORDER-ID SEQ -- CMD ARG…`.
    public static let completionSupervisor = "__supervise-completion"

    /// The supervisor of a completion: runs `then` (the order's lock inherited as descriptor 3),
    /// then records its outcome — its end when it exited 0, the order's last activity either way —
    /// whether or not the `handle-payment` that started it still runs. Returns the completion's
    /// status (127 when it could not be started). Stop signals were left ignored by its parent.
    public static func superviseCompletion(directory: String, orderId: String, seq: UInt64, then: [String], logger: Logger) -> Int32 {
        Posix.ignoreBrokenPipes()
        // Opened first: a directory it may not use (the trust rules) is said before anything runs.
        let engine: SyncEngine
        do { engine = try SyncEngine(directory: directory, isSynchronizerRegistered: true, logger: logger) } catch {
            Terminal.emit("basket-sync: \(error.description)", to: .error)
            return error.exitCode
        }
        let status: Int32
        var failure: AgentError?
        // The completion's pid to handle-payment (descriptor 4): killed alone, this supervisor
        // leaves its completion to handle-payment, which then waits for it and records its end.
        // Its end is recorded before it is reaped: killed in between, the zombie goes to
        // handle-payment with its status.
        do {
            status = try runCompletion(then, passing: 3, started: { pid in Posix.tell(4, "\(pid)\n") },
                                       beforeReaping: { ended in failure = recordCompletionEnd(ended, store: engine.store, orderId: orderId, seq: seq, logger: logger) })
        } catch {
            Terminal.emit("basket-sync: \(error.description)", to: .error)
            return 127
        }
        if let failure {
            Terminal.emit("basket-sync: the completion \(then[0]) exited with status \(status), and that could not be recorded: \(failure.description)", to: .error)
            return status == 0 ? failure.exitCode : status
        }
        return status
    }

    /// Records how an order's completion ended (exit 0: finished, never run again; else its
    /// order touched for retention). A busy database is waited for however long: the end of a
    /// completion that succeeded is the one thing that keeps it from running twice. Another
    /// failure is returned.
    static func recordCompletionEnd(_ status: Int32, store: Store, orderId: String, seq: UInt64, logger: Logger) -> AgentError? {
        while true {
            do {
                try store.withTransaction { () throws(AgentError) in
                    if status == 0 {
                        try store.recordCompletion(orderId: orderId, payment: seq, at: Date())
                    } else {
                        try store.touchOrder(orderId, at: Date())
                    }
                }
                return nil
            } catch {
                guard case .busy = error else { return error }
                logger.log(.warning, "the completion's end (status \(status)) waits for the database: \(error.description); trying again")
            }
        }
    }

    /// Runs a completion (`handle-payment --then CMD ARG…`) as an argv, without a shell, and
    /// returns its exit status (128 + the signal when killed by one).
    public static func runCompletion(_ argv: [String], passing lock: Int32? = nil, started: ((Int32) -> Void)? = nil,
                                     beforeReaping: ((Int32) -> Void)? = nil) throws(AgentError) -> Int32 {
        do { return try Posix.spawnAndWait(argv, passing: lock, started: started, beforeReaping: beforeReaping) } catch {
            guard error.operation == "run" else { throw .system(error) }
            throw .missingInput("cannot run the completion \(argv[0]): \(error.reason); give a command on the PATH or a path to one (with -C, a relative path is relative to the sync directory)")
        }
    }

    /// A payment record as printed by the payment commands: its JSON line.
    public static func describe(_ record: PaymentRecord) -> String {
        String(decoding: RecordFormat.line(record).dropLast(), as: UTF8.self)
    }
}
