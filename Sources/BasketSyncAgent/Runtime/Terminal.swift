import BasketSyncWire
import Synchronization

/// What the executable needs from the process: output, the sync directory, the exit. Kept here so
/// that the executable touches no libc.
public enum Terminal {
    /// Turns the Swift runtime's crash backtracer off, unless `SWIFT_BACKTRACE` says otherwise:
    /// the runtime looks for its `swift-backtrace` helper by a path relative to the current
    /// directory when the runtime is linked in (the static build), and runs it on a crash with
    /// basket-sync's privileges — a program anyone who can write that directory would choose.
    /// The setting is read when the runtime starts, so the process starts again (same pid,
    /// arguments and environment, plus the setting); where it cannot, it goes on as it is.
    public static func withoutBacktracer() {
        Posix.startAgainWithoutBacktracer()
    }

    /// Where a line goes.
    public enum Stream: Int32 {
        /// A result, for scripts.
        case output = 1
        /// A message, for people.
        case error = 2
    }

    /// The first failed write of a result, if any: the command then fails (74) instead of
    /// exiting 0 with its output lost (`status > /dev/full`).
    private static let outputFailure = Mutex<SystemError?>(nil)

    /// Writes `text` and a newline (unless it ends with one), whole.
    public static func emit(_ text: String, to stream: Stream = .output) {
        // A message for people is one line: what it quotes cannot end it or forge another.
        // On standard error, a pinned folder is named as people know it.
        var bytes = Array((stream == .error ? JSONWriter.printable(PinnedNames.named(text)) : text).utf8)
        if !text.hasSuffix("\n") { bytes.append(0x0A) }
        do {
            try Posix.writeAll(stream.rawValue, bytes, path: stream == .output ? "standard output" : "standard error")
        } catch {
            if stream == .output { outputFailure.withLock { $0 = $0 ?? error } }
        }
    }

    /// The command line's arguments after the program name. One that is not valid UTF-8 is refused
    /// (64): `CommandLine.arguments` would turn its bad bytes into U+FFFD, making another id.
    public static func arguments() throws(AgentError) -> [String] {
        var arguments: [String] = []
        for index in 1..<Int(CommandLine.argc) {
            guard let pointer = CommandLine.unsafeArgv[index] else { continue }
            guard let argument = String(validatingCString: pointer) else {
                let shown = String(cString: pointer)  // bad bytes shown as U+FFFD
                throw .usage("argument \(index) (\(JSONWriter.quoted(shown))) is not valid UTF-8; ids and paths must be UTF-8")
            }
            arguments.append(argument)
        }
        return arguments
    }

    /// The sync directory: `-C`, else `$BASKET_SYNC_DIR`, else the current directory; absolute.
    public static func syncDirectory(option: String?) -> String {
        var path = option ?? Posix.environment("BASKET_SYNC_DIR") ?? "."
        if path.isEmpty { path = "." }
        if !path.hasPrefix("/"), let cwd = Posix.currentDirectory() {
            path = path == "." ? cwd : "\(cwd)/\(path)"
        }
        return normalized(path)
    }

    /// `path` with its `.` and `..` components resolved by name, as the shell's `cd` does, and no
    /// empty or trailing component: `ROOT/ID/.` or `ROOT/ID/inbox/..` names cart `ID` of the
    /// tree, checked and opened as `ROOT/ID` is (never followed through a link), not a
    /// directory reached through whatever `ID` is.
    static func normalized(_ path: String) -> String {
        var components: [Substring] = []
        for component in path.split(separator: "/", omittingEmptySubsequences: true) {
            switch component {
            case ".": continue
            case "..": if !components.isEmpty { components.removeLast() } else if !path.hasPrefix("/") { components.append(component) }
            default: components.append(component)
            }
        }
        let joined = components.joined(separator: "/")
        return path.hasPrefix("/") ? "/" + joined : (joined.isEmpty ? "." : joined)
    }

    /// The tree cart's folder entered (``enter(_:)``), opened without following a link: the
    /// current directory is that very folder, whatever its name leads to since.
    nonisolated(unsafe) static var enteredCart: CartFolder?

    /// Makes `directory` the current one, as `git -C` does for the other paths of a command line.
    /// A tree's cart is entered through its folder opened without following a link (docs/spec.md
    /// §7): a folder swapped for a link after the check is never entered, and the relative paths
    /// of the command line stay in the folder entered.
    public static func enter(_ directory: String) throws(AgentError) {
        let entered: Bool
        if case .treeCart = Workspace.of(directory) {
            do throws(SystemError) {
                let folder = try CartFolder(directory)
                entered = Posix.changeDirectory(folder.path)
                if entered { enteredCart = folder }
            } catch {
                // A link or a file there is refused, never entered; a missing folder is said below.
                guard error.isMissing else { throw .system(error) }
                entered = false
            }
        } else {
            entered = Posix.changeDirectory(directory)
        }
        guard entered else {
            // A tree's cart whose directory left the tree is kept a while to be put back:
            // `init` there would make a new cart under its id and end it.
            if case let .treeCart(root, id) = Workspace.of(directory), let tree = try? Tree(root: root, readOnly: true),
               let away = tree.awayMessage(id, directory: directory) {
                throw .missingInput("\(away). basket-sync -C \(directory) init would make a new cart under this id instead, and end this one")
            }
            throw .missingInput("\(directory): no such directory; create it with basket-sync -C \(directory) init")
        }
    }

    /// Ends the process with a sysexits code; 74 instead of 0 when a result could not be written.
    public static func exit(_ code: Int32) -> Never {
        if code == 0, let failure = outputFailure.withLock({ $0 }) {
            // The command itself was done (a push delivered): only what it printed is lost.
            emit("basket-sync: standard output: write failed: \(failure.reason); the command was carried out, only its output was lost (do not retry it blindly)", to: .error)
            Posix.exit(74)
        }
        Posix.exit(code)
    }
}
