import BasketSync
import BasketSyncWire

extension SyncEngine {
    /// What reading the cart gave.
    public enum CartOutcome: Equatable {
        /// No cart file: a missing cart is not an empty cart, nothing is sent.
        case missing
        /// The same bytes as the last version read.
        case unchanged
        /// Not valid: rejected whole, the last good cart kept.
        case rejected(AgentError)
        /// Taken: it changed what basket-sync knows of the cart (a notification follows when the
        /// Mealz list changed).
        case taken
    }

    /// Reads the cart and, when it changed and is valid, notifies the library.
    ///
    /// The file is read inside the step's transaction, under the database's write lock: a pass
    /// that waited for the lock reads the version in place then, so an older cart is never
    /// committed after a newer one another process took.
    @discardableResult
    public func takeCart() throws(AgentError) -> CartOutcome {
        let read = try store.withTransaction { () throws(AgentError) in try readCartInTransaction() }
        return try finishCart(read)
    }

    /// What reading the cart inside a transaction did, for ``finishCart(_:)`` once it committed.
    struct CartRead {
        var outcome = CartOutcome.unchanged
        var rejected: (AgentError, [UInt8])?
        var taken: [UInt8]?
        var changed = false
        var summary = StepSummary()
    }

    /// The part of ``takeCart()`` inside the caller's transaction: reads the cart, runs it on the
    /// machine, stores what it made. Nothing is logged or appended yet.
    func readCartInTransaction() throws(AgentError) -> CartRead {
        let path = cartPath
        var read = CartRead()
        var readAt: Int64 = 0
        var identity: FileIdentity?
        read.summary = try stepInTransaction({ (machine, now) throws(AgentError) in
            let bytes: [UInt8]
            readAt = Int64(now.timeIntervalSince1970 * 1e9)
            switch try cartReader.read(path, configuration: configuration, seen: try store.note(.cartSeen).flatMap(CartReader.Seen.init(text:))) {
            case .missing:
                read.outcome = .missing
                return []
            case .unchanged:
                return []
            case let .unreadable(error, bytes):
                read.rejected = (error, bytes)
                return []
            case let .new(newBytes, newIdentity):
                (bytes, identity) = (newBytes, newIdentity)
            }
            let cart: HostCart
            do throws(AgentError) { cart = try decodeCart(bytes, path: path) } catch {
                read.rejected = (error, bytes)
                return []
            }
            // A cart that has not changed since a record was made was written before it.
            let writtenBefore = try store.writtenThrough(cart: identity, lastSeq: machine.state.lastOutboxSeq, showsTheCartTaken: machine.state.showsTheCartTaken(cart.products))
            read.taken = bytes
            do throws(SyncInputError) {
                return try machine.retailerBasketChanged(
                    cart.products, syncedThrough: cart.syncedThrough, outboxSeqWhenWritten: writtenBefore, at: now)
            } catch {
                throw AgentError.badData(path: path, line: 1, column: 1, reason: error.description)
            }
        }, record: { (summary) throws(AgentError) in
            // What status tells of the last cart read: when, and what it produced.
            let at = Timestamp.text(Date())
            if let (error, _) = read.rejected {
                try store.setNote(.cartRead, "\(at)\trejected\t\(error.description)")
            } else if read.taken != nil {
                read.changed = summary.stateChanged || summary.notified != nil
                try store.setNote(.cartRead, "\(at)\t\(read.changed ? "taken" : "unchanged")\t")
                // The version now known: a start finds it unchanged without reading it.
                if let identity { try store.setNote(.cartSeen, CartReader.Seen(identity: identity, readAt: readAt).text) }
                if read.changed { try store.setNote(.cartTaken, "\(at)\t\(summary.notified.map { "notified #\($0)" } ?? "no new notification")\t") }
            }
        })
        return read
    }

    /// After the transaction of ``readCartInTransaction()`` committed: the logs and the appends,
    /// then what the reader remembers.
    func finishCart(_ read: CartRead) throws(AgentError) -> CartOutcome {
        try finish([read.summary])
        if let (error, bytes) = read.rejected {
            if cartReader.remember(bytes, rejected: true) { reportError(error, logAs: "cart rejected: ") }
            return .rejected(error)
        }
        if let taken = read.taken {
            _ = cartReader.remember(taken, rejected: false)
            // A large cart's parse freed megabytes: given back, the agent's resident memory falls back.
            if taken.count > 1 << 20 { Posix.releaseFreedMemory() }
            return read.changed ? .taken : .unchanged
        }
        return read.outcome
    }

    /// Parses and validates a cart with the configured key names and limits.
    func decodeCart(_ bytes: [UInt8], path: String) throws(AgentError) -> HostCart {
        do { return try CartFormat.decode(bytes, keys: configuration.keys, limits: configuration.limits) } catch {
            throw error.badData(path: path, bytes: bytes)
        }
    }
}
