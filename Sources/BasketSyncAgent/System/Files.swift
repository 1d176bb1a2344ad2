import Glibc

/// Whole-file operations built on the wrappers of ``Posix``.
extension Posix {
    /// Reads the whole file, refusing one larger than `limit` bytes, under the open policy (a
    /// symbolic link is followed only with `follow`). Nil when it does not exist.
    package static func readFile(_ path: String, limit: Int, follow: Bool = false) throws(AgentError) -> [UInt8]? {
        try readFileAndInfo(path, limit: limit, follow: follow)?.bytes
    }

    /// Reads the whole file and says which version it read (`fstat` of the descriptor read).
    package static func readFileAndInfo(_ path: String, limit: Int, follow: Bool = false) throws(AgentError) -> (bytes: [UInt8], info: FileInfo)? {
        let fd: Int32
        let info: FileInfo
        do {
            (fd, info) = try openWithInfo(path, .readOnly, follow: follow)
        } catch {
            if error.isMissing { return nil }
            throw .system(error)
        }
        defer { close(fd) }
        let expected = Int(info.size)
        if expected > limit { throw .tooLarge(path: path, size: expected, limit: limit) }
        return (try readToEnd(fd, path: path, limit: limit, expected: expected), info)
    }

    /// Writes a whole file the durable way: a temp file beside it, created exclusively under a
    /// name nobody can guess, fsync, rename over the file, fsync of the directory. A reader sees
    /// the old content or the new, never a part. A regular file that exists keeps its permission
    /// bits (never set-id or sticky bits) and, where this process may give it (root), its owner
    /// and group — a cart `apply` rewrites as root
    /// stays the host's (read from the file itself, never from a link); a new one gets `mode`
    /// minus the umask.
    /// With `replacing`, whatever is at `path` (a link included: the rename replaces the link,
    /// never what it points to) is replaced by a new file of `mode`.
    /// `onlyOver`, when given, is the version the new file may replace (`.some(nil)`: none, only
    /// where nothing is), judged in the same step as the rename (``replace(_:_:over:)``): another
    /// file there is kept, and false returned.
    @discardableResult
    /// `madeFor`: the owner and group a file made anew is given (where this process may give it).
    package static func writeFileAtomically(_ path: String, _ bytes: [UInt8], mode: UInt32 = sharedFileMode, replacing: Bool = false,
                                            madeFor: (UInt32, UInt32)? = nil, onlyOver: FileIdentity?? = nil) throws(SystemError) -> Bool {
        var kept: UInt32?
        var owner: (UInt32, UInt32)? = madeFor
        if !replacing, let existing = info(path, follow: false) {
            guard existing.kind == .regular else { throw SystemError(path: path, shape: existing.kind.name) }
            kept = existing.mode
            owner = (existing.owner, existing.group)
        }
        let directory = dirname(of: path)
        let temporary = "\(directory)/.\(basename(of: path).prefix(200)).\(randomName()).tmp"
        // Made private, given away, then given the mode kept: a file made by root from a host's
        // cart is never, even for an instant, root's with the host's mode. The permission bits
        // only: set-id and sticky bits are never given (a cart is data, not a program).
        let fd = try open(temporary, [.writeOnly, .create, .exclusive], mode: kept == nil ? mode : 0o600)
        // Fails (and is left) where this process may not give the file away: then it is its own.
        if let (user, group) = owner { _ = fchown(fd, user, group) }
        if let kept { setMode(fd, kept & 0o777) }
        do {
            try writeAll(fd, bytes, path: temporary)
            try fsync(fd, path: temporary)
        } catch {
            close(fd)
            unlink(temporary)
            throw error
        }
        close(fd)
        do {
            // `onlyOver`: only over that version (`.some(nil)`: only where nothing is), in one step.
            if case let .some(expected) = onlyOver {
                guard try replace(temporary, path, over: expected) else { return false }
            } else {
                try rename(temporary, path)
            }
        } catch {
            unlink(temporary)
            throw error
        }
        // Through "dir/.": `dir` may be a /proc/self/fd link to a pinned folder.
        try fsyncDirectory(directory + "/.")
        return true
    }

    /// Whether `name` is one of the temporaries ``writeFileAtomically(_:_:mode:replacing:madeFor:onlyOver:)``
    /// makes: `.NAME.<16 hex>.tmp`.
    package static func isAtomicTemporary(_ name: String) -> Bool {
        let bytes = Array(name.utf8)
        guard bytes.count >= 23, bytes[0] == UInt8(ascii: "."), name.hasSuffix(".tmp"), bytes[bytes.count - 21] == UInt8(ascii: ".") else { return false }
        return bytes[(bytes.count - 20)..<(bytes.count - 4)].allSatisfy { (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains($0) }
    }

    /// Removes from `folder` the temporaries a process killed while writing a file atomically
    /// left there: files of this account's named as ``isAtomicTemporary(_:)`` says for a file
    /// `written` says basket-sync writes there, last written
    /// more than `age` seconds before `now` (a live writer renames its temporary within
    /// moments; `now` in seconds since 1970). Returns how many went.
    package static func removeStaleTemporaries(in folder: String, of written: (String) -> Bool, olderThan age: Double, now: Double) -> Int {
        let before = Int64((now - age) * 1_000_000_000)
        var removed = 0
        // `.NAME.<16 hex>.tmp`: only the temporaries of the files basket-sync writes there.
        eachName(in: folder) { name in
            guard isAtomicTemporary(name), written(String(name.dropFirst().dropLast(21))) else { return true }
            let path = "\(folder)/\(name)"
            guard let info = info(path, follow: false), info.kind == .regular, info.owner == geteuid(), info.modified < before else { return true }
            if remove(path) { removed += 1 }
            return true
        }
        return removed
    }

    /// Runs `body` with a path to `base/relative` whose folders were opened one by one with
    /// `openat` and `O_NOFOLLOW`: a folder that is a link, or is swapped for one while basket-sync
    /// works, is refused, never followed. The path goes through `/proc/self/fd/N` (the folder
    /// opened, whatever its name points to later); errors name `base/relative`.
    package static func withPinnedFolders<T>(base: String, relative: String, _ body: (String) throws(AgentError) -> T) throws(AgentError) -> T {
        let components = relative.split(separator: "/")
        guard components.count > 1, let last = components.last else { return try body("\(base)/\(relative)") }
        var fd: Int32
        do { fd = try open(base, [.directory], follow: true) } catch { throw .system(error) }
        var path = base
        for component in components.dropLast() {
            path += "/\(component)"
            let parent = fd
            defer { close(parent) }
            do { fd = try openFolder(named: String(component), in: parent, path: path) } catch { throw .system(error) }
        }
        defer { close(fd) }
        let pinned = "/proc/self/fd/\(fd)"
        PinnedNames.remember(fd, as: path)
        do { return try body("\(pinned)/\(last)") } catch {
            throw error.replacingPathPrefix(pinned, with: path)
        }
    }

    /// fsyncs a directory, so that a rename or a creation inside it is durable.
    package static func fsyncDirectory(_ path: String) throws(SystemError) {
        let fd = try open(path, [.readOnly, .directory])
        defer { close(fd) }
        try fsync(fd, path: path)
    }

    /// `mkdir -p`: creates the directory and its missing parents (0755).
    package static func makeDirectoryTree(_ path: String) throws(AgentError) {
        var current = path.hasPrefix("/") ? "" : "."
        for component in path.split(separator: "/") {
            current += "/\(component)"
            do { try makeDirectory(current, mode: 0o755) } catch { throw .system(error) }
        }
    }

    /// Makes the folders of `relative` under `base` that are missing (0755), then each of
    /// `leaves` in the last of them, one by one through the folder above opened without
    /// following a link (`mkdirat`, then `openat` with `O_NOFOLLOW`): a folder that is a link, or
    /// is swapped for one meanwhile, is refused, never followed. Returns the folders made, as
    /// paths under `base`.
    @discardableResult
    package static func makeFolders(in base: String, _ relative: String, leaves: [String] = []) throws(AgentError) -> [String] {
        var made: [String] = []
        var fd: Int32
        // A pinned folder (`/proc/self/fd/N/.`) is its descriptor, held by its owner: not opened again.
        let (at, rest) = reached(base)
        var borrowed = at != AT_FDCWD && rest == "."
        if borrowed {
            fd = at
        } else {
            do { fd = try open(base, [.directory], follow: true) } catch { throw .system(error) }
        }
        defer { if !borrowed { close(fd) } }
        /// Makes `name` in `parent` unless it is there; opens it, never through a link.
        func folder(_ name: String, in parent: Int32, path: String) throws(AgentError) -> Int32 {
            // There already (the common case): opened, without a mkdir that fails.
            if let there = try? openFolder(named: name, in: parent, path: path) { return there }
            if mkdirat(parent, name, 0o755) == 0 {
                made.append(path)
            } else if errno != EEXIST {
                throw .system(.last("mkdir", path))
            }
            // Made here, or by another process meanwhile: it must be a directory now, not a link.
            do { return try openFolder(named: name, in: parent, path: path) } catch { throw .system(error) }
        }
        var current = base
        for component in relative.split(separator: "/") {
            current += "/\(component)"
            let parent = fd
            let parentBorrowed = borrowed
            defer { if !parentBorrowed { close(parent) } }
            fd = -1
            borrowed = false
            fd = try folder(String(component), in: parent, path: current)
        }
        for leaf in leaves {
            // A folder there already (itself, not a link) needs nothing more: one stat, not a
            // mkdir, an open and a close (ten thousand carts at a start).
            var info = stat()
            if fstatat(fd, leaf, &info, AT_SYMLINK_NOFOLLOW) == 0, info.st_mode & S_IFMT == S_IFDIR { continue }
            close(try folder(leaf, in: fd, path: "\(current)/\(leaf)"))
        }
        return made
    }

    /// `path` made absolute against the working directory as spelled: its `.` and repeated
    /// slashes dropped, the links on the way kept as named — but a `..` means what the kernel
    /// makes of it, the parent of where the folder before it really is: after a link, the
    /// link's target's parent (the path so far is then where it leads).
    package static func lexicallyAbsolute(_ path: String) -> String {
        var components: [Substring] = []
        let whole = path.hasPrefix("/") ? path : (currentDirectory() ?? "") + "/" + path
        for component in whole.split(separator: "/") {
            switch component {
            case ".": continue
            case "..":
                let sofar = "/" + components.joined(separator: "/")
                if info(sofar, follow: false)?.kind == .symbolicLink, let target = resolved(sofar) {
                    components = target.split(separator: "/")
                }
                _ = components.popLast()
            default: components.append(component)
            }
        }
        return "/" + components.joined(separator: "/")
    }

    package static func dirname(of path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return "." }
        return slash == path.startIndex ? "/" : String(path[..<slash])
    }

    package static func basename(of path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return path }
        return String(path[path.index(after: slash)...])
    }
}
