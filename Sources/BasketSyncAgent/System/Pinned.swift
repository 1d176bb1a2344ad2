import Glibc
import Synchronization

/// The names people know pinned folders by. A folder opened once (`openat` with `O_NOFOLLOW`)
/// is reached afterwards through `/proc/self/fd/N`, whatever its name points to later; a message
/// must still name it as the user knows it. Every pin says its name here when it is made, so a
/// message formed while the folder was open is named right when it is printed.
package enum PinnedNames {
    private static let names = Mutex<[Int32: String]>([:])
    private static let prefix = "/proc/self/fd/"
    private static let prefixBytes = Array(prefix.utf8)

    /// Where ``prefix`` starts in `bytes` at `from` or after; nil when it is not there.
    private static func prefixStart(in bytes: UnsafeBufferPointer<UInt8>, from: Int) -> Int? {
        guard bytes.count >= prefixBytes.count, from <= bytes.count - prefixBytes.count else { return nil }
        for start in from...(bytes.count - prefixBytes.count) where bytes[start] == 0x2F {
            if prefixBytes.indices.allSatisfy({ bytes[start + $0] == prefixBytes[$0] }) { return start }
        }
        return nil
    }

    /// `/proc/self/fd/fd` is the folder people know as `name` (itself named through earlier pins).
    static func remember(_ fd: Int32, as name: String) {
        let name = named(name)
        names.withLock { $0[fd] = name }
    }

    /// `text` with every pinned folder's `/proc/self/fd/N` (and `/proc/self/fd/N/.`) named as
    /// people know it.
    package static func named(_ text: String) -> String {
        var copy = text
        return copy.withUTF8 { bytes in
            // By bytes: it runs for every folder opened, and a Unicode-aware search cost
            // thousands of instructions a call.
            guard var match = prefixStart(in: bytes, from: 0) else { return text }
            let known = names.withLock { $0 }
            guard !known.isEmpty else { return text }
            var result: [UInt8] = []
            result.reserveCapacity(bytes.count + 64)
            var position = 0
            while true {
                var index = match + prefixBytes.count
                var end = index
                while end < bytes.count, bytes[end] >= 0x30, bytes[end] <= 0x39 { end += 1 }
                if let fd = Int32(String(decoding: UnsafeBufferPointer(rebasing: bytes[index..<end]), as: UTF8.self)), let name = known[fd] {
                    result.append(contentsOf: bytes[position..<match])
                    result.append(contentsOf: name.utf8)
                    index = end
                    // "/." that is a whole component: the folder itself.
                    if index + 1 < bytes.count, bytes[index] == 0x2F, bytes[index + 1] == 0x2E, index + 2 == bytes.count || bytes[index + 2] == 0x2F { index += 2 }
                } else {
                    result.append(contentsOf: bytes[position..<index])
                }
                position = index
                guard let next = prefixStart(in: bytes, from: index) else { break }
                match = next
            }
            result.append(contentsOf: bytes[position...])
            return String(decoding: result, as: UTF8.self)
        }
    }
}

extension Posix {
    /// Where a path is reached by the `*at` calls: `/proc/self/fd/N/./REST` (a pinned folder's
    /// file) as the descriptor `N` and `REST` — the same file, without the kernel walking
    /// `/proc` to find the folder again — any other path as it is, from the working directory.
    static func reached(_ path: String) -> (directory: Int32, relative: String) {
        let prefix = "/proc/self/fd/".utf8
        guard path.utf8.starts(with: prefix) else { return (AT_FDCWD, path) }
        var copy = path
        return copy.withUTF8 { bytes in
            var index = prefix.count
            var fd: Int32 = 0
            while index < bytes.count, bytes[index] >= 0x30, bytes[index] <= 0x39, index - prefix.count < 10 {
                fd = fd &* 10 &+ Int32(bytes[index] - 0x30)
                index += 1
            }
            let digits = index - prefix.count
            // The link itself, not a folder's path, or not a descriptor.
            guard digits > 0, digits < 10, index < bytes.count, bytes[index] == 0x2F else { return (AT_FDCWD, path) }
            while index + 2 < bytes.count, bytes[index + 1] == 0x2E, bytes[index + 2] == 0x2F { index += 2 }
            index += 1
            if index >= bytes.count { return (fd, ".") }
            return (fd, String(decoding: UnsafeBufferPointer(rebasing: bytes[index...]), as: UTF8.self))
        }
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
