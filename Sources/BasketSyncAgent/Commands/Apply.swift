import BasketSync
import BasketSyncWire

extension Commands {
    /// What `apply` did.
    public struct ApplySummary: Equatable {
        /// The seqs of the `updateBasket` records applied.
        public var applied: [UInt64] = []
        /// The seqs of the `redirectToCart` records seen.
        public var redirects: [UInt64] = []
        /// The cart's `syncedThrough` before (as the cart said it; `apply` starts after the highest
        /// seq acknowledged, which may differ); nil when the cart had none.
        public var syncedThroughBefore: UInt64?
        /// The cart's `syncedThrough` after.
        public var syncedThrough: UInt64 = 0
        /// The SKUs held at `maxQuantity` instead of going past it (the shopper had raised the
        /// line since Mealz's record was made).
        public var clampedAtLimit: [String] = []
        /// The configured `maxQuantity`.
        public var maxQuantity = 0

        /// What happened, for people: one line, and one per redirect requested.
        public var human: String {
            guard !applied.isEmpty || !redirects.isEmpty else {
                guard syncedThrough != syncedThroughBefore else { return "nothing to apply: the cart is synced through \(syncedThrough)" }
                guard let before = syncedThroughBefore else {
                    return "nothing to apply; the cart had no syncedThrough: now synced through \(syncedThrough), where the host got (what its carts showed applied)"
                }
                return "nothing to apply; the cart said syncedThrough \(before), corrected to \(syncedThrough), the highest seq acknowledged"
            }
            return (["applied \(applied.count) updateBasket record(s); the cart is now synced through \(syncedThrough)"]
                + clampedAtLimit.map { "\(JSONWriter.quoted($0)) held at maxQuantity \(maxQuantity) (the cart may hold no more)" }
                + redirects.map { "redirectToCart requested (seq \($0)): open the cart for the shopper" }).joined(separator: "\n")
        }

        /// One JSON object for scripts.
        public var json: String {
            var writer = JSONWriter()
            writer.object { object in
                object.member("applied") { $0.array(applied) { $0.integer($1) } }
                object.member("redirects") { $0.array(redirects) { $0.integer($1) } }
                object.member("syncedThrough", syncedThrough)
                object.member("clampedAtLimit") { $0.array(clampedAtLimit) { $0.string($1) } }
            }
            return writer.text
        }
    }

    /// `apply`: the reference host. Applies the outbox records after the cart's `syncedThrough`
    /// in seq order (clamping each line at 0), keeps every other line and field as it is, and
    /// writes the cart atomically with the new `syncedThrough`. Serialized with other `apply`
    /// runs by a lock; safe beside a running agent (which takes the new cart on its rename).
    ///
    /// It holds the host's cart lock (`cart.json.lock`, waiting up to `lockTimeout` seconds for
    /// it, then 75) from its read to its rename, and checks under it that the cart it read is
    /// still the one on disk before renaming: a cart changed meanwhile (by a host that does not
    /// take the lock) is read again and the records applied to it, a few times, then 75.
    public static func apply(directory: String, lockTimeout: Double? = 30, logger: Logger) throws(AgentError) -> ApplySummary {
        let engine = try SyncEngine(directory: directory, isSynchronizerRegistered: true, logger: logger)
        // The files' writers' lock is waited for as long as the host's cart lock is.
        if let lockTimeout { engine.writersLockWait = lockTimeout }
        // Every file from here on reached where the engine reaches them (a tree's cart: its folder as opened).
        let directory = engine.directory
        // A cart it may not write is said as such (65), before its lock is looked for.
        try refuseLinks(directory: directory, engine: engine)
        let cartLock = try CartLock.take(directory: directory, configuration: engine.configuration, timeout: lockTimeout, orNoFolder: true) { path, holders in
            logger.log(.info, "\(path): waiting for the host's cart lock, held\(CartLock.describe(holders))")
        }
        defer { cartLock?.close() }
        // Another apply of this cart is waited for as long as the host's cart lock is.
        let lock = try engine.store.lock("apply.lock", waitingAtMost: lockTimeout ?? .infinity)
        defer { Posix.close(lock) }
        for _ in 1..<applyAttempts {
            do throws(AgentError) { return try applyOnce(directory: directory, engine: engine) } catch {
                guard case let .busy(message) = error, message == cartChanged(engine.cartPath) else { throw error }
                logger.log(.info, "\(engine.cartPath): changed while apply ran (a host writing it without the lock \(CartLock.path(directory: directory, configuration: engine.configuration))); read again")
            }
        }
        return try applyOnce(directory: directory, engine: engine)
    }

    /// Refuses (65) a cart that leads to one of basket-sync's own files (`followSymlinks`), or
    /// whose way passes through a link (without it).
    static func refuseLinks(directory: String, engine: SyncEngine) throws(AgentError) {
        let configuration = engine.configuration
        let cartPath = engine.cartPath
        if configuration.followSymlinks, let own = CartReader.ownFile(behind: cartPath, directory: directory) {
            throw .badData(path: cartPath, line: 1, column: 1, reason: "the cart leads to \(own), one of basket-sync's own files; apply writes only the host's cart")
        }
        if !configuration.followSymlinks, let link = Posix.linkOnTheWay(from: directory, to: configuration.cart) {
            throw .badData(path: cartPath, line: 1, column: 1, reason: "the way to the cart passes through a symbolic link (\(link)); set \"followSymlinks\": true in basket-sync.json to follow it")
        }
    }

    /// How many times `apply` reads a cart that keeps changing under it before it gives up (75).
    static let applyAttempts = 5

    /// The error of a cart changed between `apply`'s read and its rename.
    static func cartChanged(_ cartPath: String) -> String {
        "\(cartPath): changed while apply ran, \(applyAttempts) times; nothing was written — make the host take the cart lock around its writes (basket-sync lock -- CMD), then run apply again"
    }

    /// One read–apply–rename of `apply`, under its locks; `.busy(cartChanged)` when the cart on
    /// disk is no longer the one it read (nothing written, nothing committed).
    static func applyOnce(directory: String, engine: SyncEngine) throws(AgentError) -> ApplySummary {
        let configuration = engine.configuration

        // The outbox file is what a host reads: make sure it holds every committed record (and
        // that no file holds more than the database: then nothing is applied).
        try engine.checkDatabaseNotBehind()
        // A cart claiming beyond the outbox is refused before anything is taken or written: the
        // database is behind it, and nothing it would make could be trusted (checked again below
        // on the cart as read under the lock).
        if let error = CartReader.claimBeyondOutbox(CartReader.claim(in: directory, configuration: configuration), state: try engine.currentState(), cartPath: engine.cartPath, configuration: configuration) {
            throw error
        }
        try engine.publish(.outbox)
        // The cart in place is taken first: what it acknowledges or echoes, and a claim beyond the
        // outbox, decide where apply starts — not whether a sync happened to run before.
        _ = try engine.takeCart()

        let cartPath = engine.cartPath
        try refuseLinks(directory: directory, engine: engine)
        var found: [UInt8]?
        // The version read (nil: no cart), compared with the one on disk right before the rename.
        var readVersion: FileIdentity?
        // A cart reached through links (followSymlinks): read, then written, where the links led
        // when they were followed and checked — its folder held from the read to the rename.
        var reached: FollowedPath?
        defer { reached?.close() }
        do throws(AgentError) {
            let limit = configuration.limits.maxFileBytes
            let read: (bytes: [UInt8], info: FileInfo)?
            if configuration.followSymlinks {
                reached = try CartReader.reachCart(cartPath, configuration: configuration)
                read = try Posix.readFollowed(reached!, limit: limit)
            } else {
                read = try Posix.withPinnedFolders(base: directory, relative: configuration.cart) { (pinned) throws(AgentError) in
                    try Posix.readFileAndInfo(pinned, limit: limit, follow: false)
                }
            }
            // A hard link may be a file elsewhere: neither read nor replaced, as the readers refuse it.
            try CartReader.refuseHardLink(read?.info, path: cartPath, followSymlinks: configuration.followSymlinks)
            found = read?.bytes
            readVersion = read?.info.identity
        } catch {
            if case let .system(failure) = error, let reason = failure.shapeReason {
                if let folder = CartReader.folderReason(failure, cartPath: cartPath) {
                    throw .badData(path: cartPath, line: 1, column: 1, reason: folder)
                }
                // The way out of a link only for a link: a FIFO or a device stays refused either way.
                let link = failure.shape == FileInfo.Kind.symbolicLink.name
                throw .badData(path: cartPath, line: 1, column: 1, reason: configuration.followSymlinks || !link ? reason : reason + "; set \"followSymlinks\": true in basket-sync.json to follow a cart that is a link")
            }
            // A folder on the way that is not there: no cart, as for the readers.
            guard case let .system(failure) = error, failure.isMissing else { throw error }
            found = nil
        }
        // No cart: the first one is made from nothing; but a missing cart is not an empty cart, and
        // one that went away (the host replacing it, deleting it) is never started again from the
        // new records alone.
        if found == nil, try engine.currentState().hostCart != nil {
            throw .missingInput("\(cartPath): missing; a missing cart is not an empty cart, and apply does not start a new one over a cart that went away; write the host's cart again (an empty one is {\"\(configuration.keys.products)\": []}), then run apply")
        }
        let bytes = found ?? Array("[]".utf8)
        var document: CartDocument
        do { document = try CartDocument(bytes, keys: configuration.keys, limits: configuration.limits) } catch {
            throw error.badData(path: cartPath, bytes: bytes)
        }
        var summary = ApplySummary()
        summary.syncedThroughBefore = document.cart.syncedThrough
        // Start after the host's progress (the library's one value, as wait and status see it): a
        // cart restored from before the records, or one claiming beyond the outbox, must not make
        // records applied twice or skipped.
        let state = try engine.currentState()
        if let error = CartReader.claimBeyondOutbox(document.cart.syncedThrough, state: state, cartPath: cartPath, configuration: configuration) { throw error }
        let writtenThrough = try engine.store.withTransaction { () throws(AgentError) in
            try engine.store.writtenThrough(cart: CartReader.identity(cartPath), bytesHash: document.cart.syncedThrough != nil ? CartReader.contentHash(bytes) : nil, lastSeq: state.lastOutboxSeq, showsTheCartTaken: state.showsTheCartTaken(document.cart.products))
        }
        summary.syncedThrough = state.hostProgress(claim: document.cart.syncedThrough, writtenThrough: writtenThrough)

        let records = try outboxRecords(engine.store.lines(.outbox, after: summary.syncedThrough),
                                        path: "\(directory)/\(Projection.outbox.fileName)", after: summary.syncedThrough)
        guard !records.isEmpty || summary.syncedThrough != summary.syncedThroughBefore else { return summary }
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
        summary.clampedAtLimit = document.clampedAtLimit
        summary.maxQuantity = configuration.limits.maxQuantity
        // Published and recorded in one transaction (docs/spec.md §4 rule 4): the cart is renamed
        // into place under the database's write lock, taken at once (its notification becomes the
        // WebView's basis as the batches it applied settle; settled without it, the basis would
        // fall back to the old cart, and a basketState repeating what the WebView shows would push
        // them again), and what apply applied acknowledged as verified — all committed together.
        // Killed after the rename and before the commit, the next apply reads the cart this one
        // wrote: written after its records, it acknowledges them, and nothing is applied twice.
        let encoded = document.encoded()
        // A cart basket-sync itself would reject is never written: the host's next change would
        // be rejected with it, for ever.
        guard encoded.count <= configuration.limits.maxFileBytes else {
            throw .badData(path: cartPath, line: 1, column: 1, reason: "with the records applied (through #\(summary.syncedThrough)) the cart would be \(encoded.count) bytes, over limits.maxFileBytes (\(configuration.limits.maxFileBytes)), and rejected; nothing written — raise \"maxFileBytes\" in basket-sync.json, then run apply again")
        }
        let through = summary.syncedThrough
        let (taken, acknowledged) = try engine.store.withTransaction { () throws(AgentError) in
            // A cart that is a link (followSymlinks) is written where it leads, atomically, keeping
            // its mode. Otherwise its folders are opened one by one: never written through a link
            // swapped in.
            // Under the cart lock, the cart on disk must be the one read: a host that wrote it
            // without the lock meanwhile keeps its edit (the records are applied to it instead).
            let written: Bool
            if configuration.followSymlinks {
                // No folder for the cart when it was read: reached now (or the error of its want).
                if reached == nil { reached = try CartReader.reachCart(cartPath, configuration: configuration) }
                let reached = reached!
                // A cart made through a link is made in a folder of the link's owner only.
                let folder = try? Posix.fileInfo(reached.folder, path: reached.shown)
                if readVersion == nil, let folder, let refusal = reached.refusal(owner: folder.owner, making: true) {
                    throw .badData(path: cartPath, line: 1, column: 1, reason: refusal)
                }
                // Made anew through another account's link: the file is that account's, as the
                // link says the cart is (and as the next read checks it).
                let madeFor = readVersion == nil ? reached.owners.first.map { ($0, folder?.group ?? $0) } : nil
                do throws(SystemError) { written = try Posix.writeFileAtomically(reached.pinned, encoded, madeFor: madeFor, onlyOver: .some(readVersion)) } catch {
                    throw AgentError.system(error).replacingPathPrefix(reached.pinned, with: reached.shown)
                }
                if written { removeKilledAppliesTemporaries(beside: reached.pinned) }
            } else {
                written = try Posix.withPinnedFolders(base: directory, relative: configuration.cart) { (pinned) throws(AgentError) in
                    let written: Bool
                    do throws(SystemError) { written = try Posix.writeFileAtomically(pinned, encoded, onlyOver: .some(readVersion)) } catch { throw .system(error) }
                    if written { removeKilledAppliesTemporaries(beside: pinned) }
                    return written
                }
            }
            guard written else { throw .busy(cartChanged(cartPath)) }
            let taken = try engine.readCartInTransaction()
            let acknowledged = try engine.stepInTransaction { (machine, now) throws(AgentError) in machine.hostApplied(through: through, at: now) }
            return (taken, acknowledged)
        }
        _ = try engine.finishCart(taken)
        try engine.finish([acknowledged])
        engine.signalCommit()
        return summary
    }

    /// The temporaries an `apply` killed before its rename left beside the cart (`.CART.<16 hex>.tmp`,
    /// of this account, over an hour old): the next `apply`, holding the cart lock no other
    /// `apply` writes without, removes them — with retention set or not, they are no records.
    private static func removeKilledAppliesTemporaries(beside cart: String) {
        let name = String(Posix.basename(of: cart).prefix(200))
        _ = Posix.removeStaleTemporaries(in: Posix.dirname(of: cart), of: { $0 == name }, olderThan: SyncEngine.staleTemporaryAge, now: Date().timeIntervalSince1970)
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
}
