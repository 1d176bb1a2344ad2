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
        let configuration = (try? AgentConfiguration.load(directory: directory)) ?? AgentConfiguration()
        let bytes: [UInt8]
        if path == "-" {
            bytes = try Posix.readToEnd(0, path: "standard input", limit: configuration.limits.maxFileBytes)
        } else {
            // A file of the sync directory is read as basket-sync reads it there: never through a
            // symbolic link (the cart through one only with "followSymlinks"), and valid only if
            // the agent would take it. A file elsewhere is the user's own: its link is followed.
            // A FIFO or a device is refused either way.
            let folder = Posix.resolved(Posix.dirname(of: path))
            let root = Posix.resolved(directory)
            let inside = folder != nil && root != nil && (folder == root || folder!.hasPrefix(root! + "/"))
            let follow = !inside || (kind == .cart && configuration.followSymlinks)
            do throws(AgentError) {
                guard let read = try Posix.readFile(path, limit: configuration.limits.maxFileBytes, follow: follow) else {
                    if let enteredDirectory, !path.hasPrefix("/") {
                        throw AgentError.missingInput("\(path): no such file; with -C, paths are relative to the sync directory \(enteredDirectory) (as with git -C): give a path from there, or an absolute one")
                    }
                    throw AgentError.missingInput("\(path): no such file; check the path")
                }
                bytes = read
            } catch {
                if case .tooLarge = error { return [error.description] }
                if case var .system(failure) = error, failure.isNotRegular {
                    if !inside, let shape = failure.shape { failure.refusal = "is \(shape), not a regular file; validate reads regular files (or standard input, -)" }
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
}
