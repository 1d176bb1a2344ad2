import Glibc
import Synchronization

/// The names people know pinned folders by. A folder opened once (`openat` with `O_NOFOLLOW`)
/// is reached afterwards through `/proc/self/fd/N`, whatever its name points to later; a message
/// must still name it as the user knows it. Every pin says its name here when it is made, so a
/// message formed while the folder was open is named right when it is printed.
package enum PinnedNames {
    private static let names = Mutex<[Int32: String]>([:])
    private static let prefix = "/proc/self/fd/"

    /// `/proc/self/fd/fd` is the folder people know as `name` (itself named through earlier pins).
    static func remember(_ fd: Int32, as name: String) {
        let name = named(name)
        names.withLock { $0[fd] = name }
    }

    /// `text` with every pinned folder's `/proc/self/fd/N` (and `/proc/self/fd/N/.`) named as
    /// people know it.
    package static func named(_ text: String) -> String {
        guard text.utf8.contains(UInt8(ascii: "/")), text.contains(prefix) else { return text }
        let known = names.withLock { $0 }
        guard !known.isEmpty else { return text }
        var result = ""
        var rest = Substring(text)
        while let range = rest.range(of: prefix) {
            result += rest[..<range.lowerBound]
            var after = rest[range.upperBound...]
            let digits = after.prefix { $0.isASCII && $0.isNumber }
            guard let fd = Int32(digits), let name = known[fd] else {
                result += rest[range]
                rest = after
                continue
            }
            after = after.dropFirst(digits.count)
            // "/." that is a whole component: the folder itself.
            if after.hasPrefix("/."), after.dropFirst(2).first.map({ $0 == "/" }) ?? true { after = after.dropFirst(2) }
            result += name
            rest = after
        }
        return result + rest
    }
}

extension Posix {
    /// Where a path is reached by the `*at` calls: `/proc/self/fd/N/./REST` (a pinned folder's
    /// file) as the descriptor `N` and `REST` — the same file, without the kernel walking
    /// `/proc` to find the folder again — any other path as it is, from the working directory.
    static func reached(_ path: String) -> (directory: Int32, relative: String) {
        let prefix = "/proc/self/fd/"
        guard path.hasPrefix(prefix) else { return (AT_FDCWD, path) }
        var rest = Substring(path).dropFirst(prefix.utf8.count)
        let digits = rest.prefix { $0 >= "0" && $0 <= "9" }
        guard !digits.isEmpty, digits.count < 10, let fd = Int32(digits) else { return (AT_FDCWD, path) }
        rest = rest.dropFirst(digits.count)
        guard rest.first == "/" else { return (AT_FDCWD, path) }  // the link itself, or not a folder's path
        while rest.hasPrefix("/./") { rest = rest.dropFirst(2) }
        rest = rest.dropFirst()
        if rest.isEmpty { return (fd, ".") }
        return (fd, String(rest))
    }
}

/// A cart folder of a tree opened once, without following a link: every file basket-sync
/// makes, writes or reads in it is reached through ``path`` (`/proc/self/fd/N/.`), so that a
/// folder swapped for a link while basket-sync works is never followed out of the tree
/// (docs/spec.md §7). Closed when the last holder lets it go.
package final class CartFolder {
    /// The folder as opened: where its files are reached.
    let path: String
    /// The folder as people know it (`ROOT/ID`).
    let shown: String
    private let fd: Int32

    /// Opens `directory`: its parent as named, the folder itself never through a link.
    init(_ directory: String) throws(SystemError) {
        let parent = try Posix.open(Posix.dirname(of: directory), [.directory], follow: true)
        defer { Posix.close(parent) }
        fd = try Posix.openFolder(named: Posix.basename(of: directory), in: parent, path: directory)
        path = "/proc/self/fd/\(fd)/."
        shown = directory
        PinnedNames.remember(fd, as: directory)
    }

    deinit { Posix.close(fd) }
}

extension CartFolder {
    /// Where the files of `directory` are reached: a tree's cart through its folder opened
    /// without following a link (kept open by the folder returned), any other directory by name.
    static func reach(_ directory: String) throws(AgentError) -> (path: String, folder: CartFolder?) {
        guard case .treeCart = Workspace.of(directory) else { return (directory, nil) }
        do {
            let folder = try CartFolder(directory)
            return (folder.path, folder)
        } catch {
            throw .system(error)
        }
    }
}
