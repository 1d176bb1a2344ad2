import BasketSync
import BasketSyncWire
import Foundation

extension Commands {
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
    /// `enteredDirectory` is the sync directory when `-C` made relative paths relative to it.
    public static func validate(path: String, kind: FileKind, directory: String, enteredDirectory: String? = nil) throws(AgentError) -> [String] {
        // A file that lies in another sync directory than DIR (or DIR is none: validate run from
        // anywhere) is that directory's: judged by its rules and settings, wherever it is named from.
        var directory = directory
        var place = path == "-" ? nil : placeInDirectory(path, directory: directory)
        if path != "-", place == nil, let enclosing = enclosingSyncDirectory(of: path) {
            directory = enclosing
            place = placeInDirectory(path, directory: enclosing)
        }
        // A cart or an event is judged under the directory's settings, as the commands load them:
        // a configuration they refuse (78) is said, not replaced by the defaults. A configuration
        // being checked is judged on its own.
        let configuration = kind == .config ? AgentConfiguration() : try AgentConfiguration.load(directory: directory)
        let bytes: [UInt8]
        if path == "-" {
            bytes = try Posix.readToEnd(0, path: "standard input", limit: configuration.limits.maxFileBytes)
        } else {
            // A file of the sync directory is read as basket-sync reads it there: its folders
            // opened one by one from the directory, none through a symbolic link, nor the file
            // itself (the cart through links only with "followSymlinks", as every reader of it
            // does), and valid only if the agent would take it. A file elsewhere is the user's
            // own: its link is followed. A FIFO or a device is refused either way.
            do throws(AgentError) {
                let read: [UInt8]?
                read = try readNamedFile(path, place: place, kind: kind, configuration: configuration)
                guard let read else {
                    if let enteredDirectory, !path.hasPrefix("/") {
                        throw AgentError.missingInput("\(path): no such file; with -C, paths are relative to the sync directory \(enteredDirectory) (as with git -C): give a path from there, or an absolute one")
                    }
                    throw AgentError.missingInput("\(path): no such file; check the path")
                }
                bytes = read
            } catch {
                // What the agent would refuse the file for is a problem of the file.
                if case .tooLarge = error { return [error.description] }
                if case .badData = error { return [error.description] }
                if case var .system(failure) = error, failure.isNotRegular {
                    if place == nil, failure.refusal == nil, let shape = failure.shape { failure.refusal = "is \(shape), not a regular file; validate reads regular files (or standard input, -)" }
                    return [failure.description]
                }
                throw error
            }
        }
        let shown = path == "-" ? "standard input" : path
        if kind == .config {
            // The limit every command reads it with, whatever limits.maxFileBytes says.
            guard bytes.count <= AgentConfiguration.maximumFileBytes else {
                return ["\(shown):1:1: the configuration is over \(AgentConfiguration.maximumFileBytes) bytes (every command refuses it, 78); it holds a few settings, check that this is the right file"]
            }
            do { _ = try AgentConfiguration.parse(bytes, path: shown, in: path == "-" ? directory : Posix.dirname(of: path)) } catch { return [error.description] }
            // The directory's own configuration is judged as every command loads it, its owner and
            // mode (and the directory's) too: valid means the commands take it.
            if let place, place.relative == AgentConfiguration.fileName {
                do { _ = try AgentConfiguration.loadFile(directory: place.base) } catch {
                    // Refused for who may change it: the commands' very error and code (78).
                    if case .notReady = error { throw error }
                    return [error.description]
                }
            }
            return []
        }
        do throws(DecodingFailure) {
            if kind == .cart {
                let cart = try CartFormat.decode(bytes, keys: configuration.keys, limits: configuration.limits)
                // What a pass checks next, the lines as a whole (an id's lines adding up past a
                // quantity's range): valid here is taken there.
                do throws(SyncInputError) { try SyncStateMachine.checkAbsolute(cart.products) } catch {
                    return ["\(shown):1:1: \(error.description)"]
                }
            } else {
                _ = try EventFormat.decode(bytes, limits: configuration.limits)
            }
            return []
        } catch {
            return error.descriptions(path: shown, bytes: bytes)
        }
    }

    /// Where `path` lies in the sync directory: the path from it and the directory it is taken
    /// from; nil when the file is elsewhere. Judged by the path as spelled (against the working
    /// directory, `.` and `..` taken as written), so that a file reached through a folder of the
    /// directory that is a link is still the directory's and refused as the agent refuses it;
    /// then by where its folder really is, for a spelling of the directory through a link.
    static func placeInDirectory(_ path: String, directory: String) -> (base: String, relative: String)? {
        // A tree cart entered (its folder opened without following a link): a relative path is
        // in that very folder, whatever the cart's name leads to since.
        if let entered = Terminal.enteredCart, entered.shown == directory, !path.hasPrefix("/"),
           !path.split(separator: "/").contains("..") {
            return (entered.path, path)
        }
        // A folder that is no sync directory nor tree (validate run from anywhere) has no files
        // of its own: every file is the user's.
        guard isSyncDirectory(directory) else { return nil }
        let spelled = Posix.lexicallyAbsolute(path)
        // The directory as spelled, and where it really is (-C through a link: the working
        // directory, which relative paths start from, is the real one).
        for root in Set([Posix.lexicallyAbsolute(directory), Posix.resolved(directory)].compactMap { $0 }) {
            if spelled.hasPrefix(root == "/" ? "/" : root + "/"), spelled.count > root.count {
                return (directory, String(spelled.dropFirst(root == "/" ? 1 : root.count + 1)))
            }
        }
        guard let resolvedRoot = Posix.resolved(directory), let folder = Posix.resolved(Posix.dirname(of: path)) else { return nil }
        let name = Posix.basename(of: spelled)
        if folder == resolvedRoot { return (resolvedRoot, name) }
        guard folder.hasPrefix(resolvedRoot + "/") else { return nil }
        return (resolvedRoot, String(folder.dropFirst(resolvedRoot.count + 1)) + "/" + name)
    }

    /// Whether `directory` holds files of its own: a sync directory, a tree's root or cart.
    private static func isSyncDirectory(_ directory: String) -> Bool {
        Workspace.of(directory) != .directory || Posix.exists("\(directory)/\(Layout.stateDirectory)")
            || Posix.exists("\(directory)/\(AgentConfiguration.fileName)")
    }

    /// The nearest folder above `path` (as spelled) that is a sync directory, a tree's cart or a
    /// tree's root; nil when the file lies in none.
    static func enclosingSyncDirectory(of path: String) -> String? {
        var current = Posix.dirname(of: Posix.lexicallyAbsolute(path))
        while true {
            if isSyncDirectory(current) { return current }
            let up = Posix.dirname(of: current)
            if up == current { return nil }
            current = up
        }
    }

    /// Reads a file named on the command line (`validate FILE`, `--products FILE`); nil when
    /// there is none. One in the sync directory (`place`, from ``placeInDirectory(_:directory:)``)
    /// is read as basket-sync reads a file there: its folders opened one by one, none through a
    /// symbolic link, nor the file itself (the cart through links only with "followSymlinks", as
    /// every reader of it) — whoever may write the directory cannot make a command read a file
    /// elsewhere through it. One elsewhere is the user's own: its path walked from descriptors,
    /// a link followed only to what its owner owns (``Posix/follow(base:relative:)``). A FIFO or a
    /// device is refused either way.
    static func readNamedFile(_ path: String, place: (base: String, relative: String)?, kind: FileKind, configuration: AgentConfiguration) throws(AgentError) -> [UInt8]? {
        do throws(AgentError) {
            if let place { return try readInside(place.relative, base: place.base, kind: kind, configuration: configuration) }
            // Elsewhere, the user's own: its path walked from descriptors, as a followed cart's
            // is — a link followed only to what its own owner owns (or made by root or by this
            // account): never one another account planted towards another's file (`x/../FILE`).
            let followed = try Posix.follow(base: path.hasPrefix("/") ? "/" : ".", relative: path)
            defer { followed.close() }
            return try Posix.readFollowed(followed, limit: configuration.limits.maxFileBytes)?.bytes
        } catch {
            guard case let .system(failure) = error, failure.isMissing else { throw error }
            return nil
        }
    }

    /// Reads `relative` under `base` (the sync directory) as basket-sync reads a file there:
    /// the folders on the way opened without following a link; a cart, with "followSymlinks",
    /// as every reader of the cart follows it, other files never through a link.
    private static func readInside(_ relative: String, base: String, kind: FileKind, configuration: AgentConfiguration) throws(AgentError) -> [UInt8]? {
        let limit = configuration.limits.maxFileBytes
        let cart = configuration.cart
        if kind == .cart, configuration.followSymlinks, relative == cart || relative.hasSuffix("/" + cart) {
            let folder = String(relative.dropLast(cart.utf8.count))
            guard !folder.isEmpty else { return try CartReader.readCart(base + "/" + cart, configuration: configuration)?.bytes }
            // A tree's cart: its folder opened first, as the agent pins it.
            return try Posix.withPinnedFolders(base: base, relative: folder + ".") { (pinned) throws(AgentError) in
                try CartReader.readCart(pinned + "/" + cart, configuration: configuration)?.bytes
            }
        }
        // A tree cart's folder reached through itself opened without following a link.
        let (reached, folder) = try CartFolder.reach(base)
        return try withExtendedLifetime(folder) { () throws(AgentError) in
            try Posix.withPinnedFolders(base: reached, relative: relative) { (pinned) throws(AgentError) in
                try Posix.readFile(pinned, limit: limit, follow: false)
            }
        }
    }
}
