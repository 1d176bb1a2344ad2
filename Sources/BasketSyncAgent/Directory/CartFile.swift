import BasketSync
import BasketSyncWire
import Synchronization

/// Reads the host's cart file: refuses a symbolic link unless told to follow it, reads it whole
/// within the limit, and skips a version whose bytes are the last ones read.
struct CartReader {
    /// What reading found.
    enum Reading {
        /// No cart file: a missing cart is not an empty cart.
        case missing
        /// The same bytes as the last version read, or a version that changes nothing (the same
        /// lines and acknowledgement): nothing was sent.
        case unchanged
        /// Not readable as a cart: rejected whole; `bytes` is what was read (empty when nothing).
        case unreadable(AgentError, bytes: [UInt8])
        /// A new version, and which one (``FileInfo/identity``).
        case new([UInt8], identity: FileIdentity)
    }

    /// The bytes of the last cart version read (taken or rejected), to report a rejection once;
    /// with the identity of the last one taken, to skip reading that version again.
    private var lastBytes: [UInt8]?
    private var lastIdentity: FileIdentity?

    /// The version a process read last and found valid (as the database remembers it): its
    /// identity, and when it was read (ns since the epoch).
    struct Seen {
        var identity: FileIdentity
        var readAt: Int64
        /// ``CartReader/contentHash(_:)`` of the bytes read (nil in a note kept before it was).
        var bytesHash: Int64?
        /// ``CartReader/readingHash(_:)`` of the configuration it was read under: the same file
        /// read under other keys or limits is another reading (nil in an older note: read again).
        var readAs: Int64?

        /// A change time more than this before the read: a later write has a later change time
        /// (the kernel's clock ticks in milliseconds; a write in the same tick keeps it).
        static let margin: Int64 = 1_000_000_000

        /// Whether the file now is certainly the version seen: same device, inode, size, times,
        /// and read well after its last change, so that no write since can hide behind them.
        /// `reading`: ``CartReader/readingHash(_:)`` of the configuration now.
        func isCertainlySame(as info: FileInfo, reading: Int64) -> Bool {
            info.identity == identity && Posix.nanoseconds(from: info.changed, to: readAt) >= Seen.margin && readAs == reading
        }

        /// As kept in the database.
        var text: String {
            let tail: [Int64] = readAs.map { [bytesHash ?? 0, $0] } ?? bytesHash.map { [$0] } ?? []
            return NoteNumbers.text(identity.numbers + [readAt] + tail)
        }

        init(identity: FileIdentity, readAt: Int64, bytesHash: Int64? = nil, readAs: Int64? = nil) {
            self.identity = identity
            self.readAt = readAt
            self.bytesHash = bytesHash
            self.readAs = readAs
        }

        init?(text: String) {
            let numbers = NoteNumbers.int64s(text)
            guard (6...8).contains(numbers.count), let identity = FileIdentity(numbers: numbers.prefix(5)) else { return nil }
            self.identity = identity
            readAt = numbers[5]
            bytesHash = numbers.count >= 7 ? numbers[6] : nil
            readAs = numbers.count == 8 ? numbers[7] : nil
        }
    }

    /// A hash of a cart's bytes, eight at a time (a 100,000-line cart in about a millisecond): a
    /// version with the bytes of the one on disk when a record was made was written before that
    /// record, whatever its times or inode say (`touch`, `cp -p`).
    static func contentHash(_ bytes: [UInt8]) -> Int64 {
        bytes.withUnsafeBytes { raw in
            var hash: UInt64 = 0xCBF2_9CE4_8422_2325 ^ UInt64(raw.count)
            var index = 0
            while index + 8 <= raw.count {
                hash = (hash ^ raw.loadUnaligned(fromByteOffset: index, as: UInt64.self)) &* 0x0000_0100_0000_01B3
                hash ^= hash >> 29
                index += 8
            }
            while index < raw.count {
                hash = (hash ^ UInt64(raw[index])) &* 0x0000_0100_0000_01B3
                index += 1
            }
            return Int64(bitPattern: hash)
        }
    }

    /// What a cart's reading depends on besides its bytes: the keys, the limits, the way to the
    /// cart and whether links are followed. A change of any (a SIGHUP, a restart with another
    /// `basket-sync.json`) makes the cart read again, though the file did not change.
    /// Every field is named here, not described (a description goes through the runtime's
    /// reflection: about a millisecond, on every engine a tree makes); `readingFields` says how
    /// many there are, and a test checks it against the types.
    static func readingHash(_ configuration: AgentConfiguration) -> Int64 {
        // Every engine of a tree asks it of the same settings: the last one is kept.
        if let known = lastReadingHash.withLock({ $0 }), known.configuration == configuration { return known.hash }
        let keys = configuration.keys, limits = configuration.limits
        let fields = [keys.products, keys.id, keys.quantity, keys.syncedThrough,
                      String(limits.maxFileBytes), String(limits.maxQuantity), String(limits.maxIdBytes),
                      configuration.cart, configuration.followSymlinks ? "1" : "0"]
        // Each field with its length before it: no two settings give the same text.
        let hash = contentHash(Array(fields.map { "\($0.utf8.count):\($0)" }.joined().utf8))
        lastReadingHash.withLock { $0 = (configuration, hash) }
        return hash
    }

    /// The settings ``readingHash(_:)`` was last asked of, and their hash.
    private static let lastReadingHash = Mutex<(configuration: AgentConfiguration, hash: Int64)?>(nil)

    /// How many fields of `CartKeys` and `InputLimits` ``readingHash(_:)`` names.
    static let readingFields = (keys: 4, limits: 3)

    /// Reads the cart at `path`. `seen`, when given, is the version the database says was read
    /// last, and `reading` the ``readingHash(_:)`` of `configuration`: a file that is certainly
    /// that version, read the same way, is `.unchanged` without being read (a start over 10,000
    /// carts reads none of those that did not change).
    func read(_ path: String, configuration: AgentConfiguration, seen: (version: Seen, reading: Int64)? = nil) throws(AgentError) -> Reading {
        // One look at the name serves both questions below.
        let named = seen != nil || !configuration.followSymlinks ? Posix.info(path, follow: false) : nil
        if let seen, let info = named, info.kind == .regular, seen.version.isCertainlySame(as: info, reading: seen.reading) {
            return .unchanged
        }
        if !configuration.followSymlinks, named?.kind == .symbolicLink {
            return .unreadable(.badData(path: path, line: 1, column: 1, reason: "the cart is a symbolic link; set \"followSymlinks\": true in basket-sync.json to follow it"), bytes: [])
        }
        if !configuration.followSymlinks, let link = Posix.linkOnTheWay(from: String(path.dropLast(configuration.cart.utf8.count + 1)), to: configuration.cart) {
            return .unreadable(.badData(path: path, line: 1, column: 1, reason: "the way to the cart passes through a symbolic link (\(link)); set \"followSymlinks\": true in basket-sync.json to follow it"), bytes: [])
        }
        if configuration.followSymlinks, let own = CartReader.ownFile(behind: path, directory: String(path.dropLast(configuration.cart.utf8.count + 1))) {
            return .unreadable(.badData(path: path, line: 1, column: 1, reason: "the cart leads to \(own), one of basket-sync's own files; the cart must be the host's file"), bytes: [])
        }
        let read: (bytes: [UInt8], info: FileInfo)
        do {
            guard let file = try CartReader.readCart(path, configuration: configuration) else { return .missing }
            read = file
        } catch {
            // Too large, or a link refused: rejected as the cart's content would be.
            if case .tooLarge = error { return .unreadable(error, bytes: []) }
            if case .badData = error { return .unreadable(error, bytes: []) }
            // A folder on the way to the cart that is not there (yet, or being replaced): no cart.
            if case let .system(failure) = error, failure.isMissing { return .missing }
            if case let .system(failure) = error, let reason = failure.shapeReason {
                return .unreadable(.badData(path: path, line: 1, column: 1, reason: CartReader.folderReason(failure, cartPath: path) ?? reason), bytes: [])
            }
            throw error
        }
        do { try CartReader.refuseHardLink(read.info, path: path, followSymlinks: configuration.followSymlinks) } catch {
            return .unreadable(error, bytes: [])
        }
        // The same bytes in another file (the host wrote its cart again) are a version of their
        // own, as a one-shot command takes them: what is Mealz's in them may have changed since.
        return read.bytes == lastBytes && read.info.identity == lastIdentity ? .unchanged : .new(read.bytes, identity: read.info.identity)
    }

    /// A cart with other names (a hard link) may be a file elsewhere (docs/spec.md §7): rejected unless
    /// links are followed by choice. Every reader of the cart (the pass, `apply`, the payments) asks.
    static func refuseHardLink(_ info: FileInfo?, path: String, followSymlinks: Bool) throws(AgentError) {
        guard !followSymlinks, let info, info.links > 1 else { return }
        throw .badData(path: path, line: 1, column: 1, reason: "has \(info.links) names (a hard link): basket-sync reads no file that may live outside the sync directory; write the cart there (a temp file renamed over it), or set \"followSymlinks\": true and link it symbolically")
    }

    /// For a folder on the way to the cart that is not a directory: a reason naming that folder
    /// (the cart's path alone would not say which one). Nil for the cart file itself.
    static func folderReason(_ failure: SystemError, cartPath: String) -> String? {
        guard failure.expectsDirectory, let shape = failure.shape, failure.path != cartPath else { return nil }
        return "its folder \(failure.path) is \(shape), not a directory; make it a directory (or set \"cart\" in basket-sync.json to where the cart is)\(shape == FileInfo.Kind.symbolicLink.name ? ", or set \"followSymlinks\": true to follow the link" : "")"
    }

    /// basket-sync's own file (or folder) a cart path leads to through links, if it does.
    static func ownFile(behind cartPath: String, directory: String) -> String? {
        guard let target = Posix.resolved(cartPath), let base = Posix.resolved(directory) else { return nil }
        for name in [Projection.outbox.fileName, Projection.notifications.fileName, Projection.payments.fileName, AgentConfiguration.fileName]
            where target == "\(base)/\(name)" { return name }
        for folder in [Layout.stateDirectory, "inbox"] where target.hasPrefix("\(base)/\(folder)/") || target == "\(base)/\(folder)" {
            return "\(folder)/"
        }
        return nil
    }

    /// Reads the cart at `path` (the sync directory's `"cart"`) under the open policy, as every
    /// reader of it does (the pass, `apply`, the payments): without `followSymlinks`, its folders
    /// opened one by one and no link followed; with it, each link followed as it is when followed
    /// (``Posix/follow(base:relative:)``) — to what its owner owns only, never to one of
    /// basket-sync's own files — and the file read from the descriptor checked. Nil: no cart.
    static func readCart(_ path: String, configuration: AgentConfiguration) throws(AgentError) -> (bytes: [UInt8], info: FileInfo)? {
        let directory = String(path.dropLast(configuration.cart.utf8.count + 1))
        let limit = configuration.limits.maxFileBytes
        guard configuration.followSymlinks else {
            // Its folders opened one by one, never through a link swapped in meanwhile.
            return try Posix.withPinnedFolders(base: directory, relative: configuration.cart) { (pinned) throws(AgentError) in
                try Posix.readFileAndInfo(pinned, limit: limit, follow: false)
            }
        }
        let reached = try reachCart(path, configuration: configuration)
        defer { reached.close() }
        return try Posix.readFollowed(reached, limit: limit)
    }

    /// Where the cart `path` is, its links followed (`followSymlinks`): refused (65) when that is
    /// one of basket-sync's own files or folders. The caller closes it.
    static func reachCart(_ path: String, configuration: AgentConfiguration) throws(AgentError) -> FollowedPath {
        let directory = String(path.dropLast(configuration.cart.utf8.count + 1))
        let reached = try Posix.follow(base: directory, relative: configuration.cart)
        if let own = ownFile(reached, directory: directory) {
            reached.close()
            throw .badData(path: path, line: 1, column: 1, reason: "the cart leads to \(own), one of basket-sync's own files; the cart must be the host's file")
        }
        return reached
    }

    /// basket-sync's own file or folder that `reached` is, if it is: told by the held folder's
    /// device and inode, not by a name a link could change meanwhile.
    static func ownFile(_ reached: FollowedPath, directory: String) -> String? {
        guard let folder = try? Posix.fileInfo(reached.folder, path: reached.shown) else { return nil }
        func isFolder(_ path: String) -> Bool {
            Posix.info(path, follow: false).map { $0.device == folder.device && $0.inode == folder.inode } ?? false
        }
        if isFolder(directory) {
            for name in [Projection.outbox.fileName, Projection.notifications.fileName, Projection.payments.fileName, AgentConfiguration.fileName, Layout.stateDirectory, "inbox"]
                where reached.name == name { return name }
        }
        for sub in [Layout.stateDirectory, "inbox", "inbox/new", "inbox/cur", "inbox/bad", "inbox/tmp"] where isFolder("\(directory)/\(sub)") {
            return "\(sub)/"
        }
        return nil
    }

    /// The identity of the cart file now, without reading it; nil when there is none.
    static func identity(_ path: String) -> FileIdentity? { Posix.info(path, follow: true)?.identity }

    /// Remembers the version just taken or rejected; whether it is a new rejection worth reporting.
    mutating func remember(_ bytes: [UInt8], identity: FileIdentity? = nil, rejected: Bool) -> Bool {
        let isNew = bytes != lastBytes || bytes.isEmpty
        lastBytes = bytes.isEmpty ? nil : bytes
        lastIdentity = rejected ? nil : identity
        return rejected && isNew
    }
}

extension CartReader {
    /// The refusal of a host's side that goes by the cart's claim (`apply`, `wait` without
    /// `--after`) when the cart says it processed records beyond the outbox's last one (74): the
    /// database is behind the cart (restored from an older backup, its files consumed since, or
    /// made again) or the cart is another directory's. Its progress cannot be known: starting
    /// after the database's own would apply again what the cart may hold already, and write its
    /// claim back lower. Nil when the claim is within the outbox (or there is none).
    static func claimBeyondOutbox(_ claim: UInt64?, state: SyncState, cartPath: String, configuration: AgentConfiguration) -> AgentError? {
        guard let claim, claim > state.lastOutboxSeq else { return nil }
        let key = JSONWriter.quoted(configuration.keys.syncedThrough)
        return .database(path: PinnedNames.named(cartPath), message: "says \(key) \(claim), beyond the outbox's last record (\(state.lastOutboxSeq)): the database is behind the cart (restored from an older backup, or made again) or the cart is another directory's, so where the host got to cannot be known, and nothing is applied (what the cart holds already would be applied twice). Restore .basket-sync/ from a backup at least as new as the cart; or, if this directory was made again on purpose, write the cart's \(key) as the last record of this directory it holds (0 for none), then run the command again")
    }

    /// Why `apply` could not read the cart of `directory` as it stands (its open policy, its
    /// shape, its format and limits); nil when it can, or when there is none (apply makes it).
    /// `wait` lists no record for such a cart: its host's `apply` would fail on it at once, and a
    /// host loop on `wait` would run again and again until the cart is mended.
    static func unreadable(in directory: String, configuration: AgentConfiguration) -> AgentError? {
        standing(in: directory, configuration: configuration).unreadable
    }

    /// The `syncedThrough` of the cart of `directory` as it stands, read by the cart's open policy
    /// (no link followed unless `followSymlinks`); nil when there is no readable cart or it has none.
    static func claim(in directory: String, configuration: AgentConfiguration) -> UInt64? {
        standing(in: directory, configuration: configuration).cart?.syncedThrough
    }

    /// The cart of a directory as it stands, read once: its bytes and what they decode to, or
    /// why `apply` could not read it.
    struct Standing {
        var bytes: [UInt8]?
        var cart: HostCart?
        /// Why `apply` could not read it; nil when it can, or there is none.
        var unreadable: AgentError?
    }

    /// Reads the cart of `directory` as it stands by the cart's open policy (no link followed
    /// unless `followSymlinks`; shape, format and limits checked): one read for what a caller
    /// asks of it (its claim, whether it can be read, the host's progress).
    static func standing(in directory: String, configuration: AgentConfiguration) -> Standing {
        let path = "\(directory)/\(configuration.cart)"
        let reading: Reading
        do { reading = try CartReader().read(path, configuration: configuration) } catch { return Standing(unreadable: error) }
        switch reading {
        case .missing, .unchanged:
            return Standing()
        case let .unreadable(error, _):
            return Standing(unreadable: error)
        case let .new(bytes, _):
            do { return Standing(bytes: bytes, cart: try CartFormat.decode(bytes, keys: configuration.keys, limits: configuration.limits)) } catch {
                return Standing(bytes: bytes, unreadable: error.badData(path: path, bytes: bytes))
            }
        }
    }

    /// The host's progress as `wait` and `status` see it (docs/spec.md §4 rule 4): as if the cart
    /// on disk were taken now — its claim checked against the records that existed when it was
    /// written, what it echoes settled — which is what `apply` does before it starts after it.
    /// `refusingClaimBeyond`: a cart claiming beyond the outbox throws (see ``claimBeyondOutbox``).
    /// `standing`: the cart as the caller read it already (nil: read here).
    static func hostProgress(_ state: SyncState, store: Store, directory: String, configuration: AgentConfiguration, refusingClaimBeyond: Bool = false, standing: Standing? = nil) throws(AgentError) -> UInt64 {
        let standing = standing ?? Self.standing(in: directory, configuration: configuration)
        let cart = standing.cart
        let read = standing.bytes
        if refusingClaimBeyond, let error = claimBeyondOutbox(cart?.syncedThrough, state: state, cartPath: "\(directory)/\(configuration.cart)", configuration: configuration) {
            throw error
        }
        let writtenThrough = try store.withTransaction { () throws(AgentError) in
            try store.writtenThrough(cart: identity("\(directory)/\(configuration.cart)"), bytesHash: cart?.syncedThrough != nil ? read.map(CartReader.contentHash) : nil, lastSeq: state.lastOutboxSeq,
                                     showsTheCartTaken: cart.map { state.showsTheCartTaken($0.products) } ?? false)
        }
        guard let cart else { return state.hostProgress(claim: nil, writtenThrough: writtenThrough) }
        var trial = SyncStateMachine(state: state, configuration: configuration.syncConfiguration, isSynchronizerRegistered: true)
        _ = try? trial.retailerBasketChanged(cart.products, syncedThrough: cart.syncedThrough, outboxSeqWhenWritten: writtenThrough, at: Date())
        return trial.state.hostProgress(claim: cart.syncedThrough, writtenThrough: writtenThrough)
    }
}
