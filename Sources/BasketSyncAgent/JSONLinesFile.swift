import BasketSyncWire
import Glibc

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
        do { fd = try Posix.open(path, O_RDWR | O_CREAT | O_APPEND, mode: Posix.sharedFileMode) } catch { throw .system(error) }
        defer { Posix.close(fd) }
        guard Posix.retrying({ flock(fd, LOCK_EX) }) == 0 else {
            throw .system(SystemError(operation: "flock", path: path, code: errno))
        }
        var info = stat()
        guard fstat(fd, &info) == 0 else { throw .system(SystemError(operation: "fstat", path: path, code: errno)) }

        var outcome = Outcome()
        var size = Int64(info.st_size)
        let lastSeq: UInt64
        if let known, known.inode == UInt64(info.st_ino), known.size == size {
            lastSeq = known.lastSeq
        } else {
            let tail = try readTail(fd, size: size)
            if tail.completeSize < size {
                guard ftruncate(fd, off_t(tail.completeSize)) == 0 else {
                    throw .system(SystemError(operation: "ftruncate", path: path, code: errno))
                }
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
            known = (UInt64(info.st_ino), size, lastSeq)
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
            _ = ftruncate(fd, off_t(size))
            known = nil
            throw .system(error)
        }
        known = (UInt64(info.st_ino), size + Int64(bytes.count), newLast)
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
            buffer = try read(fd, from: start, count: Int(size - start))
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

    private func read(_ fd: Int32, from offset: Int64, count: Int) throws(AgentError) -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: count)
        var done = 0
        while done < count {
            let got = bytes.withUnsafeMutableBytes { pread(fd, $0.baseAddress! + done, count - done, off_t(offset) + off_t(done)) }
            if got < 0 {
                if errno == EINTR { continue }
                throw .system(SystemError(operation: "read", path: path, code: errno))
            }
            if got == 0 { break }
            done += got
        }
        return Array(bytes[0..<done])
    }
}
