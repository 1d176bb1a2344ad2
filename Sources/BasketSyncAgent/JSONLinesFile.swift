import BasketSyncWire


/// Appends a projection's records to its JSON Lines file, after the database commit.
///
/// Each call catches the file up with the database under an exclusive `flock`, so that several
/// processes never write the same record twice: it finds the file's last complete line, truncates
/// a torn tail left by a crash, appends every record after that line's seq in one write, and
/// fsyncs. A reader only ever sees complete lines once the fsync returns.
final class JSONLinesFile {
    let path: String
    private var known: (inode: UInt64, size: Int64, lastSeq: UInt64)?

    /// What a catch-up did.
    struct Outcome: Equatable {
        var appended = 0
        var truncatedBytes = 0
    }

    init(path: String) { self.path = path }

    /// Brings the file up to date with `lines` (the database's records after a given seq).
    /// `fetch` is called with the file's last seq and returns the records to append.
    func catchUp(fetch: (UInt64) throws(AgentError) -> [(seq: UInt64, line: [UInt8])]) throws(AgentError) -> Outcome {
        let fd: Int32
        let info: FileInfo
        do {
            fd = try Posix.open(path, [.readWrite, .create, .append])
        } catch {
            throw .system(error)
        }
        defer { Posix.close(fd) }
        do {
            _ = try Posix.lockExclusive(fd, path: path)
            info = try Posix.fileInfo(fd, path: path)
        } catch {
            throw .system(error)
        }

        var outcome = Outcome()
        var size = info.size
        let lastSeq: UInt64
        if let known, known.inode == info.inode, known.size == size {
            lastSeq = known.lastSeq
        } else {
            let tail = try readTail(fd, size: size)
            if tail.completeSize < size {
                do { try Posix.truncate(fd, to: tail.completeSize, path: path) } catch { throw .system(error) }
                outcome.truncatedBytes = Int(size - tail.completeSize)
                size = tail.completeSize
            }
            lastSeq = tail.lastSeq
        }

        let records = try fetch(lastSeq)
        guard let newLast = records.last?.seq else {
            if outcome.truncatedBytes > 0 {
                do { try Posix.fsync(fd, path: path) } catch { throw .system(error) }
            }
            known = (info.inode, size, lastSeq)
            return outcome
        }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(records.reduce(0) { $0 + $1.line.count })
        for record in records { bytes.append(contentsOf: record.line) }
        do {
            try Posix.writeAll(fd, bytes, path: path)
            try Posix.fsync(fd, path: path)
        } catch {
            // A short write may have left part of a line: cut it now rather than at the next start.
            try? Posix.truncate(fd, to: size, path: path)
            known = nil
            throw .system(error)
        }
        known = (info.inode, size + Int64(bytes.count), newLast)
        outcome.appended = records.count
        return outcome
    }

    /// The size up to the end of the last complete line, and that line's seq (0 when none).
    private func readTail(_ fd: Int32, size: Int64) throws(AgentError) -> (completeSize: Int64, lastSeq: UInt64) {
        guard size > 0 else { return (0, 0) }
        // Read backwards until the start of the last complete line is found.
        var chunkSize: Int64 = 4096
        var buffer: [UInt8] = []
        while true {
            let start = max(0, size - chunkSize)
            do { buffer = try Posix.read(fd, at: start, count: Int(size - start), path: path) } catch { throw .system(error) }
            let lastNewline = buffer.lastIndex(of: 0x0A)
            if let lastNewline {
                let completeSize = start + Int64(lastNewline) + 1
                if let previous = buffer[..<lastNewline].lastIndex(of: 0x0A) {
                    return (completeSize, RecordFormat.seq(ofLine: buffer[(previous + 1)..<lastNewline]))
                }
                if start == 0 { return (completeSize, RecordFormat.seq(ofLine: buffer[..<lastNewline])) }
            } else if start == 0 {
                return (0, 0)
            }
            chunkSize *= 4
        }
    }
}
