import Glibc

/// A file reached through symbolic links followed one at a time, each checked on what it was when
/// it was followed (`followSymlinks`): every folder on the way opened and held, every link read
/// through a descriptor of the link itself, and what it leads to checked by the descriptor that
/// is then read or written — so that no link swapped in between a check and a use is followed.
package struct FollowedPath {
    /// The folder the file is in, held open (``close()`` lets it go).
    package let folder: Int32
    /// The file's name in ``folder`` (not a link when it was reached).
    package let name: String
    /// The owners the file must have: those of the links that led to it made by neither root nor
    /// basket-sync's account (a link is followed only to what its owner owns).
    package let owners: [UInt32]
    /// The links that led to it, with their owners, for messages.
    package let links: [(path: String, owner: UInt32)]
    /// The file as people know it.
    package let shown: String

    /// The file through its held folder: `/proc/self/fd/N/NAME`, which the `*at` calls reach
    /// from the descriptor without a walk.
    package var pinned: String { "/proc/self/fd/\(folder)/\(name)" }

    /// Lets the folder go.
    package func close() { Posix.close(folder) }

    /// Why a file of `owner` may not be reached by these links, if it may not.
    /// `making`: the file is yet to be made, and `owner` is its folder's.
    package func refusal(owner: UInt32, making: Bool = false) -> String? {
        guard let other = owners.first(where: { $0 != owner }) else { return nil }
        return LinkWalker.refusal(links.last(where: { $0.owner == other })?.path ?? shown, owner: other, leadsTo: making ? "file to make in a folder" : "file", of: owner)
    }
}

extension Posix {
    /// How many links one path may pass through, as the kernel's own limit (`ELOOP` beyond).
    static let linksFollowedAtMost = 40

    /// Reaches `base/relative`, following the symbolic links on the way — the file's own
    /// included — one at a time (see ``FollowedPath``). A folder a link leads to is checked
    /// here, by its held descriptor; the file itself is checked by whoever opens it
    /// (``openFollowed(_:)``). Throws `.badData` for a refused link, `.system` otherwise (a
    /// missing folder: `isMissing`).
    package static func follow(base: String, relative: String) throws(AgentError) -> FollowedPath {
        let start: Int32
        do { start = try open(base, [.directory], follow: true) } catch { throw .system(error) }
        var walker = LinkWalker()
        return try walker.reach(from: start, shownFrom: base, relative)
    }

    /// Opens the file `path` reached for reading, checked against the links that led to it;
    /// nil when there is none. A link swapped in for the file since it was reached is refused
    /// (the open does not follow it), never read.
    package static func openFollowed(_ path: FollowedPath) throws(AgentError) -> (fd: Int32, info: FileInfo)? {
        let opened: (fd: Int32, info: FileInfo)
        do { opened = try openWithInfo(path.pinned, .readOnly) } catch {
            if error.isMissing { return nil }
            throw AgentError.system(error).replacingPathPrefix(path.pinned, with: path.shown)
        }
        if let refusal = path.refusal(owner: opened.info.owner) {
            close(opened.fd)
            throw .badData(path: path.shown, line: 1, column: 1, reason: refusal)
        }
        return opened
    }

    /// Reads the file `path` reached, as ``readFileAndInfo(_:limit:follow:)`` does, checked by
    /// ``openFollowed(_:)``.
    package static func readFollowed(_ path: FollowedPath, limit: Int) throws(AgentError) -> (bytes: [UInt8], info: FileInfo)? {
        guard let (fd, info) = try openFollowed(path) else { return nil }
        defer { close(fd) }
        let expected = Int(info.size)
        if expected > limit { throw .tooLarge(path: path.shown, size: expected, limit: limit) }
        return (try readToEnd(fd, path: path.shown, limit: limit, expected: expected), info)
    }
}

/// `O_PATH` (Linux, every architecture but alpha, parisc and sparc): a descriptor that only
/// names a file — a link itself with `O_NOFOLLOW` — for the `*at` calls, `fstat` and `readlinkat`.
private let openPathOnly: Int32 = 0o10_000_000

/// Follows the links of one path, counting them.
struct LinkWalker {
    var followed = 0
    var links: [(path: String, owner: UInt32)] = []

    /// The folder (held) and the name `relative` ends at from the folder `start` (taken over:
    /// closed or returned), following every link on the way and the last one too.
    mutating func reach(from start: Int32, shownFrom shownStart: String, _ relative: String) throws(AgentError) -> FollowedPath {
        var owners: [UInt32] = []
        let (folder, name, shown) = try entry(from: start, shownFrom: shownStart, relative, owners: &owners)
        return FollowedPath(folder: folder, name: name, owners: owners, links: links, shown: shown)
    }

    /// Walks `relative` from `start` (taken over): every component but the last is a folder,
    /// entered (a link to one followed and checked); the last, when a link, is followed to what
    /// it leads to, its owner added to `owners`.
    private mutating func entry(from start: Int32, shownFrom shownStart: String, _ relative: String, owners: inout [UInt32]) throws(AgentError) -> (Int32, String, String) {
        var components = relative.split(separator: "/").map(String.init).filter { $0 != "." }
        if relative.hasSuffix("/") || components.isEmpty || components.last == ".." { components.append(".") }
        var folder = start
        var shown = shownStart
        for component in components.dropLast() {
            let path = shown == "/" ? "/\(component)" : "\(shown)/\(component)"
            do { folder = try enter(component, from: folder, path: path) } catch {
                Posix.close(folder)
                throw error
            }
            shown = path
        }
        let name = components.last!
        let path = shown == "/" ? "/\(name)" : "\(shown)/\(name)"
        guard name != ".", let link = Self.link(named: name, in: folder) else { return (folder, name, path) }
        defer { Posix.close(folder) }
        return try follow(link, in: folder, path: path, owners: &owners)
    }

    /// The folder `name` inside `folder` (taken over: closed once the next is open).
    private mutating func enter(_ name: String, from folder: Int32, path: String) throws(AgentError) -> Int32 {
        let next: Int32
        if name != "..", let link = Self.link(named: name, in: folder) {
            var owners: [UInt32] = []
            let (target, targetName, targetShown) = try follow(link, in: folder, path: path, owners: &owners)
            defer { Posix.close(target) }
            next = Glibc.openat(target, targetName, openPathOnly | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
            if next < 0 { throw .system(Self.folderError(targetShown, in: target, name: targetName)) }
            // A folder a link leads to is checked by the descriptor held from now on.
            var info = stat()
            fstat(next, &info)
            if let other = owners.first(where: { $0 != info.st_uid }) {
                Posix.close(next)
                let reason = Self.refusal(links.last(where: { $0.owner == other })?.path ?? path, owner: other, leadsTo: "folder", of: info.st_uid)
                throw .badData(path: path, line: 1, column: 1, reason: reason)
            }
        } else {
            next = Glibc.openat(folder, name, openPathOnly | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
            if next < 0 { throw .system(Self.folderError(path, in: folder, name: name)) }
        }
        Posix.close(folder)
        return next
    }

    /// Follows the link opened as `link` (closed here) in `folder` (borrowed): its text read
    /// through that descriptor, walked from its own folder (or `/`), its owner added to
    /// `owners` unless root or basket-sync's account made it.
    private mutating func follow(_ link: Int32, in folder: Int32, path: String, owners: inout [UInt32]) throws(AgentError) -> (Int32, String, String) {
        defer { Posix.close(link) }
        followed += 1
        guard followed <= Posix.linksFollowedAtMost else { throw .system(SystemError(operation: "open", path: path, code: ELOOP)) }
        var info = stat()
        guard fstat(link, &info) == 0 else { throw .system(.last("fstat", path)) }
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let count = readlinkat(link, "", &buffer, buffer.count - 1)
        guard count > 0 else { throw .system(.last("readlink", path)) }
        let text = String(decoding: buffer.prefix(count).map { UInt8(bitPattern: $0) }, as: UTF8.self)
        if info.st_uid != 0, info.st_uid != Posix.userId {
            owners.append(info.st_uid)
        }
        links.append((path, info.st_uid))
        let absolute = text.hasPrefix("/")
        let start = absolute ? Glibc.open("/", openPathOnly | O_DIRECTORY | O_CLOEXEC) : fcntl(folder, F_DUPFD_CLOEXEC, 0)
        guard start >= 0 else { throw .system(.last("open", path)) }
        let shownStart = absolute ? "/" : Posix.dirname(of: path)
        return try entry(from: start, shownFrom: shownStart, text, owners: &owners)
    }

    /// Why the link `path` of `owner` is not followed to what `leadsTo` of `target` is.
    static func refusal(_ path: String, owner: UInt32, leadsTo kind: String, of target: UInt32) -> String {
        "the link \(path) (uid \(owner)) leads to a \(kind) of uid \(target): a link is followed only to what its own owner owns (or made by root or by uid \(Posix.userId), basket-sync's); make the file (a cart: the host's) or the link the target's owner's"
    }

    /// A descriptor of the link itself when `name` in `folder` is a symbolic link.
    private static func link(named name: String, in folder: Int32) -> Int32? {
        let fd = Glibc.openat(folder, name, openPathOnly | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        var info = stat()
        if fstat(fd, &info) == 0, FileInfo(info).kind == .symbolicLink { return fd }
        Posix.close(fd)
        return nil
    }

    /// Why the folder `name` could not be entered: of the wrong shape, or the call's error.
    private static func folderError(_ path: String, in folder: Int32, name: String) -> SystemError {
        let code = errno
        var info = stat()
        if fstatat(folder, name, &info, AT_SYMLINK_NOFOLLOW) == 0, FileInfo(info).kind != .directory {
            return SystemError(path: path, shape: FileInfo(info).kind.name, expectsDirectory: true)
        }
        return SystemError(operation: "open", path: path, code: code)
    }
}
