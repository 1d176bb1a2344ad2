import BasketSync
import BasketSyncWire

/// Reads the host's cart file: refuses a symbolic link unless told to follow it, reads it whole
/// within the limit, and skips a version whose bytes are the last ones read.
struct CartReader {
    /// What reading found.
    enum Reading {
        /// No cart file: a missing cart is not an empty cart.
        case missing
        /// The same bytes as the last version read.
        case unchanged
        /// Not readable as a cart: rejected whole; `bytes` is what was read (empty when nothing).
        case unreadable(AgentError, bytes: [UInt8])
        /// A new version.
        case new([UInt8])
    }

    /// The bytes of the last cart version read (taken or rejected), to skip an unchanged one.
    private var lastBytes: [UInt8]?

    /// Reads the cart at `path`.
    func read(_ path: String, configuration: AgentConfiguration) throws(AgentError) -> Reading {
        if !configuration.followSymlinks, Posix.linkInfo(path)?.kind == .symbolicLink {
            return .unreadable(.badData(path: path, line: 1, column: 1, reason: "the cart is a symbolic link; set \"followSymlinks\": true in basket-sync.json to follow it"), bytes: [])
        }
        let bytes: [UInt8]
        do {
            guard let read = try Posix.readFile(path, limit: configuration.limits.maxFileBytes) else { return .missing }
            bytes = read
        } catch {
            if case .tooLarge = error { return .unreadable(error, bytes: []) }
            throw error
        }
        return bytes == lastBytes ? .unchanged : .new(bytes)
    }

    /// Remembers the version just taken or rejected; whether it is a new rejection worth reporting.
    mutating func remember(_ bytes: [UInt8], rejected: Bool) -> Bool {
        let isNew = bytes != lastBytes || bytes.isEmpty
        lastBytes = bytes.isEmpty ? nil : bytes
        return rejected && isNew
    }
}

extension SyncEngine {
    /// What reading the cart gave.
    public enum CartOutcome: Equatable {
        /// No cart file: a missing cart is not an empty cart, nothing is sent.
        case missing
        /// The same bytes as the last version read.
        case unchanged
        /// Not valid: rejected whole, the last good cart kept.
        case rejected(AgentError)
        /// Taken: the library saw it (a notification follows when the Mealz list changed).
        case taken
    }

    /// Reads the cart and, when it changed and is valid, notifies the library.
    @discardableResult
    public func takeCart() throws(AgentError) -> CartOutcome {
        let path = cartPath
        let bytes: [UInt8]
        switch try cartReader.read(path, configuration: configuration) {
        case .missing: return .missing
        case .unchanged: return .unchanged
        case let .unreadable(error, read): return rejectCart(error, bytes: read)
        case let .new(read): bytes = read
        }
        let cart: HostCart
        do { cart = try decodeCart(bytes, path: path) } catch {
            return rejectCart(error, bytes: bytes)
        }
        try step { (machine, now) throws(AgentError) in
            do throws(SyncInputError) {
                return try machine.retailerBasketChanged(cart.products, syncedThrough: cart.syncedThrough, at: now)
            } catch {
                throw AgentError.badData(path: path, line: 1, column: 1, reason: error.description)
            }
        }
        _ = cartReader.remember(bytes, rejected: false)
        return .taken
    }

    private func rejectCart(_ error: AgentError, bytes: [UInt8]) -> CartOutcome {
        if cartReader.remember(bytes, rejected: true) { reportError(error) }
        return .rejected(error)
    }

    /// Parses and validates a cart with the configured key names and limits.
    func decodeCart(_ bytes: [UInt8], path: String) throws(AgentError) -> HostCart {
        do { return try CartFormat.decode(bytes, keys: configuration.keys, limits: configuration.limits) } catch {
            throw error.badData(path: path, bytes: bytes)
        }
    }
}
