import BasketSyncWire
import Glibc

/// The host's cart lock (docs/spec.md §4, "The host's cart lock"): an exclusive `flock(2)` on
/// `cart.json.lock` beside the cart (the name follows `"cart"`), taken by `apply` around its
/// read–modify–rename and by `basket-sync lock` around a host's own edit — they also lock the
/// sync directory, which no cleanup removes. The agent never takes it: a host holding it for
/// ever holds up `apply` and the host's own edits, never a pass.
public enum CartLock {
    /// The lock file of `directory`'s cart: the cart's path with `.lock` added.
    public static func path(directory: String, configuration: AgentConfiguration) -> String {
        "\(directory)/\(configuration.cart).lock"
    }

    /// The host's cart lock as held: the lock file's descriptor and the sync directory's.
    /// Closing both — or the end of every process that inherited them — releases it.
    public struct Held: Sendable {
        /// The lock file, locked: what a host's own `flock cart.json.lock` excludes.
        public let file: Int32
        /// The sync directory, locked: what keeps `apply` and `basket-sync lock` exclusive between
        /// themselves when the lock file is removed while held.
        public let directory: Int32

        /// Releases the lock.
        public func close() {
            Posix.close(file)
            Posix.close(directory)
        }
    }

    /// Takes the host's cart lock, waiting up to `timeout` seconds (nil: as long as it takes):
    /// the exclusive lock of the lock file (made when missing, never through a link, never a
    /// file of another kind), taken again when the name no longer leads to the file locked (it
    /// was removed or replaced meanwhile), then the sync directory's. 75 when the time ran out,
    /// naming the process that holds it. `waiting` is told the holders once, when the lock is
    /// not free at once. `orNoFolder`: when the cart's folder does not exist, nil (nothing to
    /// lock: there is no cart) instead of 66.
    public static func take(directory: String, configuration: AgentConfiguration, timeout: Double?, orNoFolder: Bool = false,
                            waiting: (_ path: String, _ holders: [Int32]) -> Void) throws(AgentError) -> Held? {
        let path = path(directory: directory, configuration: configuration)
        let deadline = timeout.map { Posix.monotonicSeconds() + $0 }
        var told = false
        // The lock file: held only by processes that may not write the sync directory (one
        // that opened it while an older version left it open to all), it is not waited for —
        // the directory's lock taken after it still keeps two takers apart. The directory's own
        // lock is always waited for: it is what holds when the lock file is removed while held.
        let writable = Posix.info(directory, follow: true)
        /// `what`: the lock as said (the lock file, or the sync directory taken with it).
        func wait(for fd: Int32, named shown: String, what: String, skippingReaders: Bool = false) throws(AgentError) {
            var refused = 0
            while true {
                let taken: Bool
                do { taken = try Posix.lockExclusive(fd, wait: false, path: shown) } catch { throw .system(error) }
                if taken { return }
                // Held by processes none of which may write the directory (`/proc/locks`, read at
                // each try: cheap beside the scan of every process's descriptors that names them).
                if skippingReaders, let writable, let locked = try? Posix.fileInfo(fd, path: shown) {
                    let granted = locks(device: locked.device, inode: locked.inode).granted
                    if !granted.isEmpty, !granted.contains(where: { Posix.processMayWrite($0, writable) }) { return }
                }
                refused += 1
                if !told {
                    // None seen holding it: let go in between (the next try takes it), or held by a
                    // process this one cannot see — said without a name only once tried again.
                    let seen = holders(of: fd)
                    if !seen.isEmpty || refused > 1 {
                        told = true
                        waiting(shown, seen)
                    }
                }
                if let deadline, Posix.monotonicSeconds() >= deadline {
                    throw .busy("\(shown): \(what) is held\(describe(holders(of: fd))) for more than \(AgentConfiguration.number(timeout ?? 0)) s; try again once it is released, or give a longer --timeout")
                }
                Posix.pause(microseconds: 5_000)
            }
        }
        var retaken = 0
        while true {
            let fd: Int32
            do throws(AgentError) {
                fd = try openLock(directory: directory, configuration: configuration, path: path)
            } catch {
                // No folder for the cart (`"cart"` in a folder that is not there): no cart either.
                if case let .system(failure) = error, failure.isMissing, orNoFolder { return nil }
                throw error
            }
            do throws(AgentError) {
                try wait(for: fd, named: path, what: "the host's cart lock", skippingReaders: true)
                // Removed (or a file renamed over it) between its opening and its lock: no name
                // leads to it any more, and the lock of a file nobody else will open excludes
                // nobody — take the one at the name now.
                let locked: FileInfo
                do { locked = try Posix.fileInfo(fd, path: path) } catch { throw .system(error) }
                guard locked.links > 0 else {
                    Posix.close(fd)
                    retaken += 1
                    // Removed each time it is taken: someone removes it without end.
                    guard retaken < 100 else {
                        throw .busy("\(path): the host's cart lock was removed each time it was taken (100 times): something removes it without end; stop it, then try again")
                    }
                    continue
                }
                let folder: Int32
                do { folder = try Posix.open(directory, [.directory], follow: true) } catch { throw .system(error) }
                do throws(AgentError) { try wait(for: folder, named: directory, what: "the sync directory's lock (taken with the host's cart lock; any process that can open the directory can take it: make it 0750 or 0770, as init --shared does, so that only its own accounts can)") } catch {
                    Posix.close(folder)
                    throw error
                }
                return Held(file: fd, directory: folder)
            } catch {
                Posix.close(fd)
                throw error
            }
        }
    }

    /// The lock file opened (made when missing): its folders opened one by one, never through a
    /// link (as the cart's), unless "followSymlinks" says the cart's path may pass through one.
    /// Followed, the folders' links are checked as the cart's are, and the lock itself —
    /// basket-sync's file — is never a link followed (a link to a file elsewhere would be opened,
    /// or made, there).
    static func openLock(directory: String, configuration: AgentConfiguration, path: String) throws(AgentError) -> Int32 {
        try configuration.followSymlinks
            ? lockInFollowedFolder(directory: directory, configuration: configuration, path: path)
            : Posix.withPinnedFolders(base: directory, relative: configuration.cart + ".lock") { (pinned) throws(AgentError) in
                try openOrMakeLock(pinned, path: path)
            }
    }

    /// The lock opened (or made) in the cart's folder reached through its links, the lock's name
    /// itself not followed.
    static func lockInFollowedFolder(directory: String, configuration: AgentConfiguration, path: String) throws(AgentError) -> Int32 {
        // The cart's folder itself, reached (a trailing slash: its last link followed too, and
        // checked as a folder on the way is), never the folder that holds it.
        let folder = Posix.dirname(of: configuration.cart)
        let reached = try Posix.follow(base: directory, relative: configuration.cart.contains("/") ? folder + "/" : ".")
        defer { reached.close() }
        return try openOrMakeLock("/proc/self/fd/\(reached.folder)/\(Posix.basename(of: configuration.cart)).lock", path: path)
    }

    /// ``openOrMake(_:)`` with its errors said for the lock file at `path`.
    static func openOrMakeLock(_ opened: String, path: String) throws(AgentError) -> Int32 {
        do { return try openOrMake(opened) } catch {
            if let shape = error.shapeReason {
                throw .refused("\(path): \(shape); the host's cart lock is a regular file — remove it, basket-sync makes it again")
            }
            throw .system(error)
        }
    }

    /// Opens the lock file for reading (all a `flock` needs), making it when missing. Opened
    /// without `O_CREAT` first: in a shared sticky directory (`fs.protected_regular`) an
    /// `O_CREAT` open of another account's file is refused even where reading it is allowed.
    /// Readable by those who may write its folder alone — its owner, and its group where the
    /// folder is the group's to write (a shared directory) — so that no one else can open it to
    /// take the lock; one of this account's made more open before is closed down to that.
    static func openOrMake(_ path: String) throws(SystemError) -> Int32 {
        let folder = Posix.info(Posix.dirname(of: path), follow: true)
        let mode: UInt32 = (folder?.mode ?? 0) & 0o020 != 0 ? 0o660 : 0o600
        while true {
            do {
                let fd = try Posix.open(path, .readOnly)
                if let info = try? Posix.fileInfo(fd, path: path), info.owner == geteuid(), info.mode & 0o777 & ~mode != 0 { _ = fchmod(fd, mode_t(mode)) }
                return fd
            } catch {
                guard error.isMissing else { throw error }
            }
            do {
                // The mode as said, whatever the umask (0660 in a shared directory, not 0640).
                let fd = try Posix.open(path, [.create, .exclusive], mode: mode)
                _ = fchmod(fd, mode_t(mode))
                return fd
            } catch {
                guard error.code == EEXIST else { throw error }
            }
        }
    }

    /// " by process 12, process 13", or, when none is seen, that it is not.
    public static func describe(_ holders: [Int32]) -> String {
        holders.isEmpty ? " by a process not seen from here (or let go just then)" : " by " + holders.map { "process \($0)" }.joined(separator: ", ")
    }

    /// The live processes holding the lock on the file open as `fd`. `/proc/locks` says which
    /// process took each granted lock, and which wait (`->`): the taker, when it still has the
    /// file open; else (a `flock` belongs to the open file, which a child inherits, and the
    /// taker may be gone) the processes with a descriptor on the file that are not waiting for
    /// it, among those `/proc` lets this process see; else the taker `/proc/locks` names.
    static func holders(of fd: Int32) -> [Int32] {
        guard let info = try? Posix.fileInfo(fd, path: "") else { return [] }
        let me = Posix.processId
        var open: Set<Int32> = []
        for entry in Posix.listDirectory("/proc") {
            guard let pid = Int32(entry), pid != me else { continue }
            for descriptor in Posix.listDirectory("/proc/\(pid)/fd") {
                if let target = Posix.info("/proc/\(pid)/fd/\(descriptor)", follow: true), target.device == info.device, target.inode == info.inode {
                    open.insert(pid)
                    break
                }
            }
        }
        let (granted, waiting) = locks(device: info.device, inode: info.inode)
        let taker = granted.filter(open.contains)
        if !taker.isEmpty { return taker.sorted() }
        let inherited = open.subtracting(waiting)
        return inherited.isEmpty ? granted.sorted() : inherited.sorted()
    }

    /// The processes `/proc/locks` names for the `flock` locks on one file (its device as the
    /// kernel prints it, `MAJOR:MINOR:INODE` with the numbers of the device in hexadecimal):
    /// those granted, and those waiting (`->`).
    static func locks(device: UInt64, inode: UInt64) -> (granted: Set<Int32>, waiting: Set<Int32>) {
        guard let text = try? Posix.readFileAndInfo("/proc/locks", limit: 1 << 22, follow: true)?.bytes else { return ([], []) }
        let major = ((device >> 8) & 0xfff) | ((device >> 32) & ~0xfff)
        let minor = (device & 0xff) | ((device >> 12) & ~0xff)
        func hex(_ number: UInt64) -> String {
            let digits = String(number, radix: 16)
            return digits.count < 2 ? "0" + digits : digits
        }
        let file = "\(hex(major)):\(hex(minor)):\(inode)"
        // Each flock line: whether it waits, its pid, its file.
        let lines = String(decoding: text, as: UTF8.self).split(separator: "\n").compactMap { line -> (waits: Bool, pid: Int32, file: Substring)? in
            var fields = line.split(separator: " ").dropFirst()
            let waits = fields.first == "->"
            if waits { fields = fields.dropFirst() }
            let kept = Array(fields)
            guard kept.count >= 5, kept[0] == "FLOCK", let pid = Int32(kept[3]) else { return nil }
            return (waits, pid, kept[4])
        }
        // By the inode alone where no line names the device as stat gives it (an overlay file
        // system locks the file beneath, on a device of its own).
        let exact = lines.contains { $0.file == file }
        var granted: Set<Int32> = [], waiting: Set<Int32> = []
        for line in lines where exact ? line.file == file : line.file.hasSuffix(":\(inode)") {
            if line.waits { waiting.insert(line.pid) } else { granted.insert(line.pid) }
        }
        return (granted, waiting)
    }
}
