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
        /// Not valid yet, but written less than ``SyncEngine/rejectionSettleSeconds`` ago (an
        /// in-place write a host may still be making): read again once settled, then rejected
        /// if it is still so. Only where ``SyncEngine/settlesRejections`` is set (the agent).
        case unsettled
    }

    /// How long a version that does not parse must stay as it is before it is rejected, where
    /// rejections settle: a host writing in place (truncate, then write) may be read between the two.
    static let rejectionSettleSeconds = 0.5

    /// Whether the version `identity` that does not parse has stayed as it is long enough to be
    /// rejected; the first read of it starts its time.
    func rejectionSettled(_ identity: FileIdentity) -> Bool {
        let now = Posix.monotonicSeconds()
        if let unsettled, unsettled.identity == identity { return now - unsettled.since >= Self.rejectionSettleSeconds }
        unsettled = (identity, now)
        return false
    }

    /// Reads the cart and, when it changed and is valid, notifies the library.
    ///
    /// The file is read inside the step's transaction, under the database's write lock: a pass
    /// that waited for the lock reads the version in place then, so an older cart is never
    /// committed after a newer one another process took.
    /// `askingFirst`: whether the cart is certainly as last read, with nothing else for a step
    /// to do, is asked first in a read of the database (no write lock): a whole pass mostly finds
    /// it so.
    @discardableResult
    public func takeCart(askingFirst: Bool = false) throws(AgentError) -> CartOutcome {
        if askingFirst, try store.database.withReadTransaction({ () throws(AgentError) in try certainlyAsLastReadWithNothingToStep(cartPath) }) {
            return .unchanged
        }
        let read = try store.withTransaction { () throws(AgentError) in try readCartInTransaction() }
        return try finishCart(read)
    }

    /// What reading the cart inside a transaction did, for ``finishCart(_:)`` once it committed.
    struct CartRead {
        var outcome = CartOutcome.unchanged
        var rejected: (AgentError, [UInt8])?
        var taken: [UInt8]?
        var takenIdentity: FileIdentity?
        /// ``CartReader/contentHash(_:)`` of the bytes taken.
        var takenHash: Int64?
        var changed = false
        var summary = StepSummary()
    }

    /// The part of ``takeCart()`` inside the caller's transaction: reads the cart, runs it on the
    /// machine, stores what it made. Nothing is logged or appended yet.
    /// `askingFirst`: whether the cart is certainly as last read, with nothing else for a step to
    /// do, is asked first (a pass over many carts, most of them unchanged); a cart known to have
    /// changed (a wake-up's, `apply`'s) goes straight to its step.
    func readCartInTransaction(askingFirst: Bool = false) throws(AgentError) -> CartRead {
        let path = cartPath
        var read = CartRead()
        if askingFirst, try certainlyAsLastReadWithNothingToStep(path) { return read }
        var readAt: Int64 = 0
        var identity: FileIdentity?
        read.summary = try stepInTransaction({ (machine, now) throws(AgentError) in
            let bytes: [UInt8]
            readAt = Int64(now.timeIntervalSince1970 * 1e9)
            switch try cartReader.read(path, configuration: configuration, seen: try store.note(.cartSeen).flatMap(CartReader.Seen.init(text:)).map { ($0, readingHash) }) {
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
            // A large cart is read by its changed lines, and summed from the version before.
            var large: (layout: CartStream.CartLayout, summed: (sums: [ExactID: Int], touched: [ExactID])?)?
            if bytes.count >= Self.largeCartBytes,
               let laidOut = CartStream.decode(bytes, keys: configuration.keys, limits: configuration.limits, after: largeCart?.layout) {
                cart = laidOut.cart
                large = (laidOut.layout, nil)
                if let change = laidOut.change, let before = largeCart?.sums,
                   configuration.limits.maxQuantity <= Int.max / (max(laidOut.layout.lines.count, largeCart!.layout.lines.count) + 1) {
                    large!.summed = Self.summed(before, change)
                }
            } else {
                // A large cart the one-pass reader gave up on goes to the tree decoder alone.
                do throws(AgentError) { cart = try decodeCart(bytes, path: path, onePassTried: bytes.count >= Self.largeCartBytes) } catch {
                    // Maybe read between a host's truncate and its write: judged once settled.
                    if settlesRejections, let identity, !rejectionSettled(identity) {
                        read.outcome = .unsettled
                        return []
                    }
                    read.rejected = (error, bytes)
                    return []
                }
            }
            // A cart that has not changed since a record was made was written before it.
            let hash = CartReader.contentHash(bytes)
            read.takenHash = hash
            let claimsHash = cart.syncedThrough != nil ? hash : nil
            let writtenBefore = try store.writtenThrough(cart: identity, bytesHash: claimsHash, lastSeq: machine.state.lastOutboxSeq, showsTheCartTaken: machine.state.showsTheCartTaken(cart.products))
            // When the version was written: its change time (a rename into place sets it). A
            // batch whose window was still open then is echoed in time, however late the pass.
            let writtenAt = identity.map { Date(timeIntervalSince1970: Double($0.changed) / 1e9) }
            read.taken = bytes
            read.takenIdentity = identity
            // Asked before the step, which moves nothing it depends on: refused, whether said
            // again or not (the same claim is reported once).
            let refused = cart.syncedThrough.map { machine.refuses(claim: $0, writtenThrough: writtenBefore) } ?? false
            let effects: [SyncEffect]
            if let large, let summed = large.summed {
                // Whether the host cart changed is known from the changed lines when the state's
                // host cart is the one the version before added up to (the same storage: no walk).
                let known = machine.state.hostCart == largeCart?.sums
                largeCart = (large.layout, summed.sums)
                effects = machine.retailerBasketChanged(
                    lines: cart.products, summed: summed.sums, syncedThrough: cart.syncedThrough, outboxSeqWhenWritten: writtenBefore, writtenAt: writtenAt, at: now)
                hostCartTouched = known ? summed.touched : nil
            } else {
                do throws(SyncInputError) {
                    effects = try machine.retailerBasketChanged(
                        cart.products, syncedThrough: cart.syncedThrough, outboxSeqWhenWritten: writtenBefore, writtenAt: writtenAt, at: now)
                    largeCart = large.map { ($0.layout, machine.state.hostCart ?? [:]) }
                } catch {
                    throw AgentError.badData(path: path, line: 1, column: 1, reason: error.description)
                }
            }
            // A claim refused as past what existed: these bytes were written by then, whenever
            // they come back (restored, copied) — the claim they make stays refused. Every
            // version refused is kept so, the claim said or not (a host repeating a claim in
            // versions of other bytes).
            if let claimsHash, refused { try store.noteCartVersion(bytesHash: claimsHash, through: writtenBefore) }
            return effects
        }, record: { (summary) throws(AgentError) in
            // What status tells of the last cart read: when, and what it produced.
            let at = Timestamp.text(Date())
            if let (error, _) = read.rejected {
                try store.setNote(.cartRead, "\(at)\trejected\t\(error.description)")
                // The version last taken is no longer the one to judge by: the next pass reads
                // the file and judges it under the settings of then (a version taken, rejected
                // under other limits or keys, then good again, is read again, never said
                // "unchanged" while its rejection stands).
                try store.setNote(.cartSeen, "")
            } else if read.taken != nil {
                read.changed = summary.stateChanged || summary.notified != nil
                try store.setNote(.cartRead, "\(at)\t\(read.changed ? "taken" : "unchanged")\t")
                // The version now known: a start finds it unchanged without reading it.
                if let identity { try store.setNote(.cartSeen, CartReader.Seen(identity: identity, readAt: readAt, bytesHash: read.takenHash, readAs: readingHash).text) }
                if read.changed { try store.setNote(.cartTaken, "\(at)\t\(summary.notified.map { "notified #\($0)" } ?? "no new notification")\t") }
            }
        })
        return read
    }

    /// Whether the cart is certainly the version last read, and a step would have nothing else
    /// to do: no default store of the tree to take, no clock to note or follow for pending
    /// batches. Such a cart takes no step — its state is not even read (a start over 10,000 known
    /// carts reads none of them); a step on it would find the cart unchanged and change nothing.
    private func certainlyAsLastReadWithNothingToStep(_ path: String) throws(AgentError) -> Bool {
        guard let seen = try store.note(.cartSeen).flatMap(CartReader.Seen.init(text:)),
              let info = Posix.info(path, follow: false), info.kind == .regular, seen.isCertainlySame(as: info, reading: readingHash) else { return false }
        // A tree cart that follows the tree's default store takes it at a step.
        if store.cart != 0, try store.note(.ownStore) == nil, try Tree.defaultStore(store.database) != nil { return false }
        // Pending batches: their clock noted for this boot and not stepped since (a state kept
        // in the older layout holds its batches itself: stepped as before).
        guard try store.metaBlob(.pendingRows) != nil else { return false }
        guard try store.hasPendingRows() else { return true }
        return try clockNoted(offset: Self.clockOffset(Date()))
    }

    /// After the transaction of ``readCartInTransaction(askingFirst:)`` committed: the logs and the appends,
    /// then what the reader remembers.
    func finishCart(_ read: CartRead) throws(AgentError) -> CartOutcome {
        try finish([read.summary])
        if let (error, bytes) = read.rejected {
            if cartReader.remember(bytes, rejected: true) { reportError(error, logAs: "cart rejected: ") }
            return .rejected(error)
        }
        if let taken = read.taken {
            unsettled = nil
            _ = cartReader.remember(taken, identity: read.takenIdentity, rejected: false)
            // A large cart's parse freed megabytes: given back, the agent's resident memory falls back.
            if taken.count > 1 << 20 { Posix.releaseFreedMemory() }
            return read.changed ? .taken : .unchanged
        }
        return read.outcome
    }

    /// The size from which a cart is read by its changed lines (``CartStream``): below it, a
    /// whole read costs little and nothing is kept.
    static let largeCartBytes = 64 * 1024

    /// `sums` (what the lines of the version before add up to per id, none at 0) with the
    /// lines that changed, and the ids whose sum moved; nil when a sum would go below 0 (the
    /// sums were not those of the version before).
    static func summed(_ sums: [ExactID: Int], _ change: CartStream.LineChange) -> (sums: [ExactID: Int], touched: [ExactID])? {
        var net: [ExactID: Int] = [:]
        for line in change.removed { net[ExactID(line.id), default: 0] -= line.quantity }
        for line in change.added { net[ExactID(line.id), default: 0] += line.quantity }
        var result = sums
        var touched: [ExactID] = []
        for (id, delta) in net where delta != 0 {
            let value = (result[id] ?? 0) + delta
            guard value >= 0 else { return nil }
            result[id] = value == 0 ? nil : value
            touched.append(id)
        }
        return (result, touched)
    }

    /// Parses and validates a cart with the configured key names and limits; with
    /// `onePassTried`, by the tree decoder alone (the one-pass reader gave up on it already).
    func decodeCart(_ bytes: [UInt8], path: String, onePassTried: Bool = false) throws(AgentError) -> HostCart {
        do {
            if onePassTried { return try CartDocument(bytes, keys: configuration.keys, limits: configuration.limits).cart }
            return try CartFormat.decode(bytes, keys: configuration.keys, limits: configuration.limits)
        } catch {
            throw error.badData(path: path, bytes: bytes)
        }
    }
}


