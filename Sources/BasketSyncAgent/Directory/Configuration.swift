import BasketSyncWire
import Glibc

extension AgentConfiguration {
    /// The settings that hold in `directory`: its `basket-sync.json`, or in a cart of a tree, the
    /// tree's; a missing file means every default.
    public static func load(directory: String) throws(AgentError) -> AgentConfiguration {
        if case let .treeCart(root, _) = Workspace.of(directory) { return try loadFile(directory: root) }
        return try loadFile(directory: directory)
    }

    /// Reads `basket-sync.json` in `directory`; a missing file means every default. A file
    /// that is not basket-sync's own — owned by another account, writable by others, or in a
    /// directory others may rename it in — is refused (78), never read (docs/spec.md §7).
    ///
    /// `asItsOwner`: trusted as the directory's owner would trust it (owned by that account or
    /// root, writable by nobody else) — how another account (the Mealz side's `push`) learns the
    /// layout of a directory it delivers into, and nothing more.
    static func loadFile(directory: String, asItsOwner: Bool = false) throws(AgentError) -> AgentConfiguration {
        let path = "\(directory)/\(fileName)"
        let bytes: [UInt8]
        let account = asItsOwner ? (Posix.info(directory, follow: true)?.owner ?? geteuid()) : geteuid()
        do throws(AgentError) {
            guard let read = try Posix.readFileAndInfo(path, limit: maximumFileBytes) else { return AgentConfiguration() }
            if let refusal = Trust.directoryRefusal(directory, as: account) ?? Trust.refusal(read.info, path: path, what: "the configuration", as: account) {
                throw AgentError.notReady(refusal)
            }
            bytes = read.bytes
        } catch {
            switch error {
            case let .system(failure) where failure.isNotRegular:
                throw .configuration(path: path, line: 1, column: 1, reason: failure.shapeReason ?? failure.description)
            case .tooLarge:
                throw .configuration(path: path, line: 1, column: 1, reason: "the configuration is over \(maximumFileBytes) bytes; it holds a few settings, check that this is the right file")
            default:
                throw error
            }
        }
        return try parse(bytes, path: path, in: directory)
    }

    /// Parses a configuration file's bytes; a problem names `path:line:column`. The absolute
    /// paths it gives are judged by where they lie from `directory`, the sync directory it is for.
    package static func parse(_ bytes: [UInt8], path: String, in directory: String) throws(AgentError) -> AgentConfiguration {
        do { return try parse(bytes, in: place(of: directory)) } catch {
            let (line, column) = lineAndColumn(of: error.offset, in: bytes)
            throw .configuration(path: path, line: line, column: column, reason: error.reason)
        }
    }

    /// Where absolute paths are judged from for `directory`: their real paths as far as they
    /// exist, and what each folder on their way is (device, inode).
    static func place(of directory: String) -> Place {
        Place(directory: directory, resolve: resolvedAsFarAsItExists) { path in
            Posix.info(path, follow: true).map { [$0.device, $0.inode] }
        }
    }

    /// A configuration error about `setting`: it names the setting's value (line:column) where
    /// the file in `directory` sets it, and the file's start where it does not (its default holds).
    static func settingError(directory: String, setting: String, reason: String) -> AgentError {
        let path = "\(directory)/\(fileName)"
        var place = (line: 1, column: 1)
        // Read again, as bounded and as unfollowed as the settings were: only to find the place.
        if let bytes = (try? Posix.readFileAndInfo(path, limit: maximumFileBytes))?.bytes,
           let node = (try? JSONParser.parse(bytes, allowComments: true))?[setting] {
            place = lineAndColumn(of: node.offset, in: bytes)
        }
        return .configuration(path: path, line: place.line, column: place.column, reason: reason)
    }

    /// `path` (absolute) with the links of its longest existing part resolved, the rest as written.
    static func resolvedAsFarAsItExists(_ path: String) -> String {
        var head = path
        var rest: [String] = []
        while head != "/" && !head.isEmpty {
            if let real = Posix.resolved(head) { return ([real == "/" ? "" : real] + rest.reversed()).joined(separator: "/") }
            rest.append(Posix.basename(of: head))
            head = Posix.dirname(of: head)
        }
        return path
    }
}
