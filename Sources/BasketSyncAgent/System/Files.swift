/// Whole-file operations built on the wrappers of ``Posix``.
extension Posix {
    /// Reads the whole file, refusing one larger than `limit` bytes. Nil when it does not exist.
    static func readFile(_ path: String, limit: Int) throws(AgentError) -> [UInt8]? {
        try readFileAndInfo(path, limit: limit)?.bytes
    }

    /// Reads the whole file and says which version it read (`fstat` of the descriptor read).
    static func readFileAndInfo(_ path: String, limit: Int) throws(AgentError) -> (bytes: [UInt8], info: FileInfo)? {
        let fd: Int32
        let info: FileInfo
        do {
            fd = try open(path, .readOnly)
        } catch {
            if error.isMissing { return nil }
            throw .system(error)
        }
        defer { close(fd) }
        do { info = try fileInfo(fd, path: path) } catch { throw .system(error) }
        let expected = Int(info.size)
        if expected > limit { throw .tooLarge(path: path, size: expected, limit: limit) }
        return (try readToEnd(fd, path: path, limit: limit, expected: expected), info)
    }

    /// Writes a whole file the durable way: a temp file beside it, fsync, rename, fsync of the
    /// directory. A reader sees the old content or the new, never a part.
    /// A file that exists keeps its mode; a new one gets `mode` minus the umask.
    static func writeFileAtomically(_ path: String, _ bytes: [UInt8], mode: UInt32 = sharedFileMode) throws(SystemError) {
        let kept = linkInfo(path)?.mode
        let directory = dirname(of: path)
        let temporary = "\(directory)/.\(basename(of: path)).\(processId).tmp"
        let fd = try open(temporary, [.writeOnly, .create, .truncate], mode: kept ?? mode)
        if let kept { setMode(fd, kept) }
        do {
            try writeAll(fd, bytes, path: temporary)
            try fsync(fd, path: temporary)
        } catch {
            close(fd)
            unlink(temporary)
            throw error
        }
        close(fd)
        do { try rename(temporary, path) } catch {
            unlink(temporary)
            throw error
        }
        try fsyncDirectory(directory)
    }

    /// fsyncs a directory, so that a rename or a creation inside it is durable.
    static func fsyncDirectory(_ path: String) throws(SystemError) {
        let fd = try open(path, [.readOnly, .directory])
        defer { close(fd) }
        try fsync(fd, path: path)
    }

    /// `mkdir -p`: creates the directory and its missing parents (0755).
    static func makeDirectoryTree(_ path: String) throws(AgentError) {
        var current = path.hasPrefix("/") ? "" : "."
        for component in path.split(separator: "/") {
            current += "/\(component)"
            do { try makeDirectory(current, mode: 0o755) } catch { throw .system(error) }
        }
    }

    static func dirname(of path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return "." }
        return slash == path.startIndex ? "/" : String(path[..<slash])
    }

    static func basename(of path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return path }
        return String(path[path.index(after: slash)...])
    }
}
