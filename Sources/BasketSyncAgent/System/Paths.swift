import CStatfs
import Glibc
import CMalloc

extension Posix {
    // MARK: Paths

    /// The first directory on the way from `base` to `base/relative` (its last component
    /// excluded) that is a symbolic link, if any: opening with `O_NOFOLLOW` checks the last
    /// component only.
    package static func linkOnTheWay(from base: String, to relative: String) -> String? {
        var path = base
        for component in relative.split(separator: "/").dropLast() {
            path += "/\(component)"
            if info(path, follow: false)?.kind == .symbolicLink { return path }
        }
        return nil
    }

    /// The parent of this process when it started (read first thing by `main`): a `wait`
    /// whose parent is another one now was left by the process that started it.
    package static let parentAtStart: pid_t = getppid()

    /// Seconds on the monotonic clock (never set back).
    package static func monotonicSeconds() -> Double {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return Double(now.tv_sec) + Double(now.tv_nsec) / 1e9
    }

    /// This boot of the machine (`/proc/sys/kernel/random/boot_id`; `BASKET_SYNC_BOOT_ID` stands
    /// for it in tests, which cannot cut the power).
    package static let bootId: String = {
        if let chosen = environment("BASKET_SYNC_BOOT_ID"), !chosen.isEmpty, !chosen.contains(" ") { return chosen }
        let read = (try? readFile("/proc/sys/kernel/random/boot_id", limit: 64, follow: true)).flatMap { $0 }
        let text = read.map { String(decoding: $0, as: UTF8.self).trimmingSpaces } ?? ""
        return text.isEmpty || text.contains(" ") ? "unknown" : text
    }()

    /// Whether process `pid` may write the directory `folder` (its file-system ids against the
    /// owner, group and mode, as the kernel judges them; root may). A process whose ids cannot be
    /// read (gone, or not visible from here) is taken as one that may.
    package static func processMayWrite(_ pid: Int32, _ folder: FileInfo) -> Bool {
        guard let bytes = try? readFile("/proc/\(pid)/status", limit: 1 << 16, follow: true) else { return true }
        var uid: UInt32?, gid: UInt32?, groups: [UInt32] = []
        for line in String(decoding: bytes, as: UTF8.self).split(separator: "\n") {
            let fields = line.split(whereSeparator: { $0 == "\t" || $0 == " " })
            guard let key = fields.first else { continue }
            // Real, effective, saved, file system: the last is what permissions are judged by.
            if key == "Uid:", fields.count >= 5 { uid = UInt32(fields[4]) }
            if key == "Gid:", fields.count >= 5 { gid = UInt32(fields[4]) }
            if key == "Groups:" { groups = fields.dropFirst().compactMap { UInt32($0) } }
        }
        guard let uid, let gid else { return true }
        if uid == 0 { return true }
        if uid == folder.owner { return folder.mode & 0o200 != 0 }
        if gid == folder.group || groups.contains(folder.group) { return folder.mode & 0o020 != 0 }
        return folder.mode & 0o002 != 0
    }

    /// Seconds on the boot clock (`CLOCK_BOOTTIME`: never stepped, counts a suspend too).
    package static func bootSeconds() -> Double {
        var now = timespec()
        clock_gettime(CLOCK_BOOTTIME, &now)
        return Double(now.tv_sec) + Double(now.tv_nsec) / 1e9
    }

    /// Nanoseconds on the boot clock (`CLOCK_BOOTTIME`), for ordering events of one boot.
    package static func bootNanoseconds() -> UInt64 {
        var now = timespec()
        clock_gettime(CLOCK_BOOTTIME, &now)
        return UInt64(now.tv_sec) * 1_000_000_000 + UInt64(now.tv_nsec)
    }

    /// Writes back everything of the file system holding `path` (`syncfs`): many small files
    /// made durable together, where an fsync each would wait for the disk once each.
    package static func syncFileSystem(of path: String) throws(SystemError) {
        let fd = try open(path, [.readOnly, .directory])
        defer { close(fd) }
        if basket_sync_syncfs(fd) != 0 { throw .last("syncfs", path) }
    }

    /// Nanoseconds since the epoch on the wall clock (the clock file times are stamped with).
    package static func wallClockNanoseconds() -> Int64 {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        return nanoseconds(now)
    }

    /// `later - earlier` in nanoseconds, held at the bounds of 64 bits (times at the bounds).
    package static func nanoseconds(from earlier: Int64, to later: Int64) -> Int64 {
        let (difference, overflow) = later.subtractingReportingOverflow(earlier)
        return overflow ? (later < earlier ? .min : .max) : difference
    }

    /// A time in nanoseconds, held at the bounds of 64 bits (the years 1677 and 2262): a file
    /// stamped beyond them (`touch -d 2300-01-01`, by whoever may write it) compares as the
    /// bound, never traps.
    package static func nanoseconds(_ time: timespec) -> Int64 {
        let (seconds, overflow) = Int64(time.tv_sec).multipliedReportingOverflow(by: 1_000_000_000)
        if overflow { return time.tv_sec < 0 ? .min : .max }
        let (sum, past) = seconds.addingReportingOverflow(Int64(time.tv_nsec))
        return past ? .max : sum
    }

    /// The wall clock as file times are stamped from it (its coarse reading: a time stamped
    /// after this call is never earlier, while the clock is not set back).
    package static func coarseWallClockNanoseconds() -> Int64 {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME_COARSE, &now)
        return nanoseconds(now)
    }

    /// What the path is, or nil when it does not exist: with `follow`, what a symbolic link
    /// leads to (`stat`); without, the link itself (`lstat`).
    package static func info(_ path: String, follow: Bool) -> FileInfo? {
        var info = stat()
        let (at, relative) = reached(path)
        return fstatat(at, relative, &info, follow ? 0 : AT_SYMLINK_NOFOLLOW) == 0 ? FileInfo(info) : nil
    }

    /// What `relative` — a path kept as a C string, reached from the folder `at` — is, as
    /// ``info(_:follow:)`` says it, without making a C string each call (a poller's looks).
    package static func info(at: Int32, _ relative: [CChar], follow: Bool) -> FileInfo? {
        var info = stat()
        return relative.withUnsafeBufferPointer { fstatat(at, $0.baseAddress!, &info, follow ? 0 : AT_SYMLINK_NOFOLLOW) } == 0 ? FileInfo(info) : nil
    }

    /// A C string of `text` made once for calls that use it again and again, freed by ``freeCString(_:)``.
    package static func cString(_ text: String) -> UnsafeMutablePointer<CChar> { strdup(text) }

    /// Frees what ``cString(_:)`` made.
    package static func freeCString(_ string: UnsafeMutablePointer<CChar>) { Glibc.free(string) }

    /// What `relative`, from the folder `at`, is; nil when it cannot be stat'ed.
    package static func info(at: Int32, _ relative: UnsafePointer<CChar>, follow: Bool) -> FileInfo? {
        var info = stat()
        return fstatat(at, relative, &info, follow ? 0 : AT_SYMLINK_NOFOLLOW) == 0 ? FileInfo(info) : nil
    }

    /// Where `path` is reached from by the `*at` calls (a pinned folder's descriptor or the
    /// working directory) and the rest of it as a C string: kept by what stats the same paths
    /// again and again.
    package static func reachedAsCString(_ path: String) -> (at: Int32, relative: [CChar]) {
        let (at, relative) = reached(path)
        return (at, Array(relative.utf8CString))
    }

    /// A folder opened only to reach files from it (`O_PATH`), following links as its path
    /// does, and what it is; nil when it cannot be opened or is no folder.
    package static func openFolderPath(_ path: String) -> (fd: Int32, info: FileInfo)? {
        let openPath: Int32 = 0o10000000  // O_PATH, which Glibc's module does not export
        let fd = retrying { Glibc.open(path, openPath | O_DIRECTORY | O_CLOEXEC) }
        guard fd >= 0 else { return nil }
        var info = stat()
        guard fstat(fd, &info) == 0 else {
            close(fd)
            return nil
        }
        return (fd, FileInfo(info))
    }

    /// A folder named `name` under the folder `at`, opened only to reach files from it
    /// (`O_PATH`), a link there not followed; nil when it cannot be opened or is no folder.
    package static func openFolderPath(at: Int32, _ name: String) -> (fd: Int32, info: FileInfo)? {
        let openPath: Int32 = 0o10000000  // O_PATH, which Glibc's module does not export
        let fd = retrying { openat(at, name, openPath | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) }
        guard fd >= 0 else { return nil }
        var info = stat()
        guard fstat(fd, &info) == 0 else {
            close(fd)
            return nil
        }
        return (fd, FileInfo(info))
    }

    package static func exists(_ path: String) -> Bool {
        let (at, relative) = reached(path)
        return faccessat(at, relative, F_OK, 0) == 0
    }

    /// Whether `name` names an entry of a folder and nothing else: one path component, not
    /// empty, neither `.` nor `..`, no `/` and no NUL. A name read from the database or a file is
    /// used only when it is one (docs/spec.md §7).
    package static func isOneComponent(_ name: String) -> Bool {
        !name.isEmpty && name != "." && name != ".." && !name.utf8.contains(UInt8(ascii: "/")) && !name.utf8.contains(0)
    }

    package static func isDirectory(_ path: String) -> Bool {
        var info = stat()
        let (at, relative) = reached(path)
        return fstatat(at, relative, &info, 0) == 0 && (info.st_mode & S_IFMT) == S_IFDIR
    }

    package static func rename(_ from: String, _ to: String) throws(SystemError) {
        let (fromAt, fromRelative) = reached(from), (toAt, toRelative) = reached(to)
        if renameat(fromAt, fromRelative, toAt, toRelative) != 0 { throw .last("rename to \(to)", from) }
    }

    /// Puts `temporary` at `path` in one step, only over the file `expected` names (its device,
    /// inode, size and content time; nil: only where nothing is): a file renamed there meanwhile
    /// by someone else is never lost. Swapped in (`RENAME_EXCHANGE`), the file it displaced is
    /// judged: the one expected is removed; another is put back, and `temporary` (ours) removed —
    /// false. Where the file system cannot swap, judged first and renamed (a narrow window).
    package static func replace(_ temporary: String, _ path: String, over expected: FileIdentity?) throws(SystemError) -> Bool {
        let (fromAt, fromRelative) = reached(temporary), (toAt, toRelative) = reached(path)
        func swap() -> Int32 { basket_sync_renameat2(fromAt, fromRelative, toAt, toRelative, 2) }
        func unsupported() -> Bool { errno == EINVAL || errno == ENOSYS }
        let ours = info(temporary, follow: false)
        guard let expected else {
            if basket_sync_renameat2(fromAt, fromRelative, toAt, toRelative, 1) == 0 { return true }
            if errno == EEXIST { unlink(temporary); return false }
            guard unsupported() else { throw .last("rename to \(path)", temporary) }
            if info(path, follow: false) != nil { unlink(temporary); return false }
            try rename(temporary, path)
            return true
        }
        // Judged first as well: a write seen now never needs the swap back (killed between the
        // swap and the swap back, the displaced cart would be left under the temporary's name).
        guard info(path, follow: false)?.identity == expected else { unlink(temporary); return false }
        if swap() != 0 {
            if errno == ENOENT { unlink(temporary); return false }
            guard unsupported() else { throw .last("rename to \(path)", temporary) }
            try rename(temporary, path)
            return true
        }
        // `path` holds ours, `temporary` what was there (a rename keeps a file's content time;
        // its change time moves).
        if let displaced = info(temporary, follow: false), displaced.device == expected.device, displaced.inode == expected.inode,
           displaced.size == expected.size, displaced.modified == expected.modified {
            unlink(temporary)
            return true
        }
        // Another file: put back. Should a newer one have replaced ours in between, it is what
        // `path` holds in the end (the one it replaced is older).
        _ = swap()
        if let back = info(temporary, follow: false), let ours, !(back.device == ours.device && back.inode == ours.inode) { _ = swap() }
        unlink(temporary)
        return false
    }

    package static func unlink(_ path: String) {
        let (at, relative) = reached(path)
        _ = unlinkat(at, relative, 0)
    }

    /// Gives the heap glibc keeps after freeing back to the system (`malloc_trim`): after a large
    /// cart, the resident memory falls back.
    package static func releaseFreedMemory() { _ = malloc_trim(0) }

    /// Removes a file, a link (not what it leads to) or an empty folder; false when nothing was removed.
    package static func remove(_ path: String) -> Bool {
        let (at, relative) = reached(path)
        if unlinkat(at, relative, 0) == 0 { return true }
        return (errno == EISDIR || errno == EPERM) && unlinkat(at, relative, AT_REMOVEDIR) == 0
    }

    /// Removes `path` and, when it is a folder (not a link to one), everything in it; what cannot
    /// be removed is left.
    package static func removeTree(_ path: String) {
        if info(path, follow: false)?.kind == .directory {
            for name in (try? entries(of: path)) ?? [] { removeTree("\(path)/\(name)") }
        }
        _ = remove(path)
    }

    package static func makeDirectory(_ path: String, mode: UInt32) throws(SystemError) {
        let (at, relative) = reached(path)
        if mkdirat(at, relative, mode_t(mode)) != 0, errno != EEXIST { throw .last("mkdir", path) }
    }

    /// Creates the file if it is missing and closes it: the close is an inotify event.
    package static func touch(_ path: String, mode: UInt32) {
        guard let fd = try? open(path, [.writeOnly, .create], mode: mode) else { return }
        // A file with other names (a hard link to one elsewhere) is replaced, never touched:
        // its times are those of the file elsewhere (docs/spec.md §7). Its few bytes go with it.
        if let info = try? fileInfo(fd, path: path), info.links > 1 {
            close(fd)
            let bytes = ((try? readFile(path, limit: 4096)) ?? nil) ?? []
            _ = try? writeFileAtomically(path, bytes, mode: mode, replacing: true)
            return
        }
        // Its times set to now: a poller sees by stat what inotify sees by the close.
        _ = futimens(fd, nil)
        close(fd)
    }

    /// The pids holding a `flock` on the file at `path`, from `/proc/locks` (nothing is locked or
    /// tried: a process starting at that instant is never disturbed).
    package static func lockHolders(_ path: String) -> [Int32] {
        guard let info = info(path, follow: false),
              let bytes = try? readFile("/proc/locks", limit: 16 * 1024 * 1024, follow: true) else { return [] }
        var holders: [Int32] = []
        for line in String(decoding: bytes, as: UTF8.self).split(separator: "\n") {
            // "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF": pid, then major:minor:inode.
            let fields = line.split(separator: " ")
            guard fields.count >= 6, fields[1] == "FLOCK", let pid = Int32(fields[4]),
                  let inode = fields[5].split(separator: ":").last.flatMap({ UInt64($0) }), inode == info.inode else { continue }
            holders.append(pid)
        }
        return holders
    }

    /// Sixteen random hex digits, for names nobody can guess.
    package static func randomName() -> String {
        var generator = SystemRandomNumberGenerator()
        let hex = String(generator.next() as UInt64, radix: 16)
        return String(repeating: "0", count: 16 - hex.count) + hex
    }

    /// The path a chain of symbolic links leads to, absolute; nil when it leads nowhere.
    package static func resolved(_ path: String) -> String? {
        guard let pointer = realpath(path, nil) else { return nil }
        defer { free(pointer) }
        return String(cString: pointer)
    }

    /// Why a new file cannot be made in `directory`, if it cannot: EROFS or EACCES.
    package static func unwritable(_ directory: String) -> Int32? {
        var info = statvfs()
        if statvfs(directory, &info) == 0, info.f_flag & UInt(ST_RDONLY) != 0 { return EROFS }
        if access(directory, W_OK) != 0, errno == EACCES || errno == EROFS { return errno }
        return nil
    }

    /// Why `path` cannot be opened for reading or writing, if the answer is a permission: EACCES.
    package static func isPermissionDenied(_ path: String) -> Bool { access(path, F_OK) != 0 && errno == EACCES }

    /// The names in a directory, sorted; empty when it cannot be read.
    package static func listDirectory(_ path: String) -> [String] {
        guard let directory = opendir(path) else { return [] }
        return names(in: directory)
    }

    /// Visits the names in a directory (no `.`, `..`) in the order they are read, holding none
    /// of them after its visit: `visit` returns false to stop. For what counts or looks for
    /// names — a folder another account fills with millions costs no memory. Nothing when it
    /// cannot be read.
    package static func eachName(in path: String, _ visit: (String) -> Bool) {
        guard let directory = opendir(path) else { return }
        defer { closedir(directory) }
        let nameOffset = MemoryLayout<dirent>.offset(of: \dirent.d_name)!
        while let entry = readdir(directory) {
            let name = String(cString: UnsafeRawPointer(entry).advanced(by: nameOffset).assumingMemoryBound(to: CChar.self))
            if name != "." && name != "..", !visit(name) { return }
        }
    }

    /// How many names of a directory `counted` says yes to (see ``eachName(in:_:)``).
    package static func countNames(in path: String, where counted: (String) -> Bool) -> Int {
        var count = 0
        eachName(in: path) { name in
            if counted(name) { count += 1 }
            return true
        }
        return count
    }

    /// Whether a name of a directory is one `wanted` says yes to (see ``eachName(in:_:)``).
    package static func containsName(in path: String, where wanted: (String) -> Bool) -> Bool {
        var found = false
        eachName(in: path) { name in
            found = wanted(name)
            return !found
        }
        return found
    }

    /// The names in a directory (no `.`, `..`), sorted; the directory is opened without
    /// following a link and without blocking, and must be one: otherwise an error says what it is.
    package static func entries(of path: String) throws(SystemError) -> [String] {
        let fd = try open(path, [.directory])
        guard let directory = fdopendir(fd) else {
            let error = SystemError.last("opendir", path)
            close(fd)
            throw error
        }
        return names(in: directory)
    }

    /// The entries of a directory read once: the names that are UTF-8, sorted, and as bytes
    /// those that are not (a `String` cannot name them: they are set aside by
    /// ``renameRaw(in:_:to:)``).
    package static func listing(of path: String) throws(SystemError) -> (names: [String], unnamable: [[UInt8]]) {
        // Opened as a directory (O_DIRECTORY: no fstat needed), read by getdents64 itself.
        let (at, relative) = reached(path)
        var fd = retrying { Glibc.openat(at, relative, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW) }
        // Not a directory, a link, missing: said as any open says it.
        if fd < 0 { fd = try open(path, [.directory]) }
        defer { close(fd) }
        var names: [String] = []
        var unnamable: [[UInt8]] = []
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 32_768, alignment: 8)
        defer { buffer.deallocate() }
        while true {
            let count = basket_sync_getdents64(fd, buffer.baseAddress, UInt(buffer.count))
            if count < 0 {
                if errno == EINTR { continue }
                throw .last("getdents64", path)
            }
            if count == 0 { break }
            // linux_dirent64: inode (8 bytes), offset (8), record length (2), type (1), the name (NUL-ended).
            var offset = 0
            while offset + 19 < count {
                let length = Int(buffer.loadUnaligned(fromByteOffset: offset + 16, as: UInt16.self))
                guard length > 19, offset + length <= count else { break }
                let start = buffer.baseAddress!.advanced(by: offset + 19).assumingMemoryBound(to: UInt8.self)
                let bytes = UnsafeBufferPointer(start: start, count: strnlen(UnsafeRawPointer(start).assumingMemoryBound(to: CChar.self), length - 19))
                offset += length
                if bytes.count == 1 && bytes[0] == 0x2E || bytes.count == 2 && bytes[0] == 0x2E && bytes[1] == 0x2E { continue }
                if let name = String(validating: bytes, as: UTF8.self) {
                    names.append(name)
                } else {
                    unnamable.append(Array(bytes))
                }
            }
        }
        return (names.sorted(), unnamable)
    }

    /// Renames the entry named by the bytes `name` in `directory` to `target` (never following a link).
    package static func renameRaw(in directory: String, _ name: [UInt8], to target: String) throws(SystemError) {
        let path = Array(directory.utf8) + [0x2F] + name + [0]
        let result = path.withUnsafeBufferPointer { buffer in
            buffer.withMemoryRebound(to: CChar.self) { (name) in
                let (at, relative) = reached(target)
                return renameat(AT_FDCWD, name.baseAddress!, at, relative)
            }
        }
        if result != 0 { throw .last("rename to \(target)", directory + "/" + shownBytes(name)) }
    }

    /// Bytes that are not UTF-8, shown: printable ASCII as is, any other byte as `\xNN`.
    package static func shownBytes(_ bytes: [UInt8]) -> String {
        bytes.map { (0x20..<0x7F).contains($0) && $0 != 0x5C ? String(UnicodeScalar($0)) : "\\x" + String($0, radix: 16, uppercase: true).leftPadded(2) }.joined()
    }

    /// Reads and closes `directory`. Each name is read in place: copying `d_name` whole reads past
    /// a short entry (the crash of swift-corelibs-foundation#5472).
    private static func names(in directory: OpaquePointer) -> [String] {
        defer { closedir(directory) }
        let nameOffset = MemoryLayout<dirent>.offset(of: \dirent.d_name)!
        var names: [String] = []
        while let entry = readdir(directory) {
            let name = String(cString: UnsafeRawPointer(entry).advanced(by: nameOffset).assumingMemoryBound(to: CChar.self))
            if name != "." && name != ".." { names.append(name) }
        }
        return names.sorted()
    }

    /// The target of a symbolic link, if `path` is one.
    package static func linkTarget(_ path: String) -> String? {
        var target = [CChar](repeating: 0, count: 4096)
        let count = readlink(path, &target, target.count - 1)
        guard count > 0 else { return nil }
        return String(decoding: target[0..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    // MARK: The process

    package static var processId: Int32 { getpid() }

    package static var userId: UInt32 { getuid() }

    package static func environment(_ name: String) -> String? { getenv(name).map { String(cString: $0) } }

    /// Executes this program again with `SWIFT_BACKTRACE=enable=no` when the variable is not set
    /// (see ``Terminal/withoutBacktracer()``); returns only when it cannot.
    package static func startAgainWithoutBacktracer() {
        guard getenv("SWIFT_BACKTRACE") == nil else { return }
        setenv("SWIFT_BACKTRACE", "enable=no", 1)
        _ = execv("/proc/self/exe", CommandLine.unsafeArgv)
    }

    /// The working directory, absolute; nil when it cannot be said (removed, say).
    package static func currentDirectory() -> String? {
        guard let pointer = getcwd(nil, 0) else { return nil }
        defer { free(pointer) }
        return String(cString: pointer)
    }

    package static func changeDirectory(_ path: String) -> Bool { chdir(path) == 0 }

    package static func exit(_ code: Int32) -> Never { Glibc.exit(code) }

    /// Runs `argv` without a shell (nothing in data is ever executed) and waits for it: its exit
    /// status, or 128 + the signal that killed it. `outputToError`: its standard output is this
    /// process's standard error. `signalsIgnored`: the stop signals stay ignored in it (a process
    /// that must outlive a Ctrl-C to record what its own child did); otherwise it gets the defaults.
    /// `alsoPassing` is given as descriptor 4 (after `inherited` as 3); `started` is told the
    /// child's pid as soon as it runs; `beforeReaping` how it ended, before it is reaped.
    package static func spawnAndWait(_ argv: [String], passing inherited: Int32? = nil, alsoPassing fourth: Int32? = nil,
                                     outputToError: Bool = false, signalsIgnored: Bool = false,
                                     started: ((pid_t) -> Void)? = nil, signaled: ((Bool) -> Void)? = nil,
                                     beforeReaping: ((Int32) -> Void)? = nil) throws(SystemError) -> Int32 {
        // The child gets stdin, stdout, stderr and, as descriptor 3, `inherited`: nothing else of
        // this process (its database, its files) stays open in it or in what it leaves running.
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        // Each one given is first copied above the numbers it goes to: a source that is itself 3
        // or 4 would otherwise be overwritten by the other's dup2 before its own.
        let copies = try [inherited, fourth].map { (fd: Int32?) throws(SystemError) -> Int32? in
            guard let fd else { return nil }
            let copy = fcntl(fd, F_DUPFD_CLOEXEC, Int32(10))
            if copy < 0 { throw .last("fcntl", argv[0]) }
            return copy
        }
        defer { for copy in copies { if let copy { Glibc.close(copy) } } }
        if let copy = copies[0] { posix_spawn_file_actions_adddup2(&actions, copy, 3) }
        if let copy = copies[1] { posix_spawn_file_actions_adddup2(&actions, copy, 4) }
        if outputToError { posix_spawn_file_actions_adddup2(&actions, 2, 1) }
        SpawnedProcess.closeDescriptors(from: fourth != nil ? 5 : inherited == nil ? 3 : 4, in: &actions)
        // As system(3): while the child runs, this process waits for it whatever signal comes (a
        // Ctrl-C reaches the child, in the same process group); the child gets the defaults.
        let waitedThrough = [SIGINT, SIGQUIT, SIGTERM, SIGHUP]
        let previous = waitedThrough.map { Glibc.signal($0, SIG_IGN) }
        defer { for (signal, handler) in zip(waitedThrough, previous) { _ = Glibc.signal(signal, handler) } }
        let pid = try spawn(argv, actions: &actions, defaults: signalsIgnored ? [] : waitedThrough)
        started?(pid)
        // Told how it ended while it is still a zombie: killed before it reaps it, this process
        // leaves it to the one its orphans go to, which can read it again.
        if let beforeReaping {
            let ended = basket_sync_wait_unreaped(pid)
            if ended >= 0 { beforeReaping(ended) }
        }
        var raw: Int32 = 0
        if retrying({ waitpid(pid, &raw, 0) }) < 0 { throw .last("waitpid", argv[0]) }
        signaled?(raw & 0x7F != 0)
        return exitStatus(raw)
    }

    /// A wait status as a shell says it: the exit status, or 128 + the signal that killed it.
    private static func exitStatus(_ raw: Int32) -> Int32 {
        let signal = raw & 0x7F
        return signal == 0 ? (raw >> 8) & 0xFF : 128 + signal
    }

    /// Waits for process `pid` (a child, or an orphan given to this subreaper) to end: its exit
    /// status, or 128 + the signal that killed it; nil when it is not this process's to wait for.
    package static func waitFor(_ pid: pid_t) -> Int32? {
        var raw: Int32 = 0
        if retrying({ waitpid(pid, &raw, 0) }) < 0 { return nil }
        return exitStatus(raw)
    }

    /// Writes `text` to descriptor `fd` and closes it, ignoring failure (a pipe whose reader is
    /// gone, a descriptor not given).
    package static func tell(_ fd: Int32, _ text: String) {
        let bytes = Array(text.utf8)
        _ = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
        Glibc.close(fd)
    }

    /// The processes whose parent is this one now (its children, and the orphans given to it as a
    /// subreaper), the first started first, read from /proc.
    package static func orphansGiven() -> [pid_t] {
        let me = getpid()
        var children: [(pid: pid_t, started: UInt64)] = []
        for entry in listDirectory("/proc") {
            guard let pid = pid_t(entry), let bytes = try? readFile("/proc/\(pid)/stat", limit: 4096, follow: true) else { continue }
            let text = String(decoding: bytes, as: UTF8.self)
            guard let close = text.lastIndex(of: ")") else { continue }
            // After "(name)": state, ppid, …; the start time is field 22 (the 20th after the name).
            let fields = text[text.index(after: close)...].split(separator: " ")
            guard fields.count > 19, pid_t(fields[1]) == me, let started = UInt64(fields[19]) else { continue }
            children.append((pid, started))
        }
        return children.sorted { ($0.started, $0.pid) < ($1.started, $1.pid) }.map(\.pid)
    }

    /// Makes this process the one its descendants' orphans are given to (`PR_SET_CHILD_SUBREAPER`).
    package static func becomeSubreaper() -> Bool { basket_sync_become_subreaper() == 0 }

    /// A pipe: (read end, write end), both close-on-exec (set at once: this process starts
    /// children only through posix_spawn, whose descriptors are given explicitly).
    package static func makePipe() throws(SystemError) -> (read: Int32, write: Int32) {
        var ends: [Int32] = [0, 0]
        guard pipe(&ends) == 0 else { throw .last("pipe", "") }
        for end in ends { _ = fcntl(end, F_SETFD, FD_CLOEXEC) }
        return (ends[0], ends[1])
    }

    /// Whether `command` names a program this process may run: a path (with a slash) to an
    /// executable regular file, or a name found so on the `PATH`, as `posix_spawnp` searches it.
    package static func isRunnable(_ command: String) -> Bool { whyNotRunnable(command) == nil }

    /// Why `command` cannot be run ("no such program", "not executable", "a directory"), or nil
    /// when it can.
    package static func whyNotRunnable(_ command: String) -> String? {
        func problem(_ path: String) -> String? {
            var info = stat()
            guard stat(path, &info) == 0 else { return "no such program" }
            guard info.st_mode & S_IFMT == S_IFREG else { return "not a program (\(FileInfo(info).kind.name))" }
            return access(path, X_OK) == 0 ? nil : "not executable (chmod +x it)"
        }
        if command.contains("/") { return problem(command) }
        guard !command.isEmpty else { return "no such program" }
        let path = environment("PATH") ?? "/bin:/usr/bin"
        var found: String?
        for folder in path.split(separator: ":", omittingEmptySubsequences: false) {
            let candidate = "\(folder.isEmpty ? "." : String(folder))/\(command)"
            guard let reason = problem(candidate) else { return nil }
            if reason != "no such program", found == nil { found = reason }
        }
        return found.map { "\($0), as found on the PATH" } ?? "no such program on the PATH"
    }

    /// Ignores SIGPIPE (a write to a closed pipe then fails with EPIPE instead of ending the process).
    package static func ignoreBrokenPipes() { _ = Glibc.signal(SIGPIPE, SIG_IGN) }

    /// Waits until one of `fds` is readable, a signal interrupts, or `timeout` milliseconds pass
    /// (-1: no timeout). Returns which descriptors are readable.
    package static func waitReadable(_ fds: [Int32], timeout: Int32) throws(SystemError) -> [Bool] {
        var polled = fds.map { pollfd(fd: $0, events: Int16(POLLIN), revents: 0) }
        if poll(&polled, nfds_t(polled.count), timeout) < 0 {
            if errno == EINTR { return fds.map { _ in false } }
            throw .last("poll", "")
        }
        return polled.map { $0.revents != 0 }
    }
}

private extension String {
    func leftPadded(_ width: Int) -> String { String(repeating: "0", count: max(0, width - count)) + self }
}

extension Substring.UTF8View {
    /// Whether these bytes begin with `prefix`'s: one `memcmp` where both are contiguous (a
    /// native string's are), which the generic `starts(with:)` is not (it runs for every
    /// inotify event).
    func hasBytePrefix(_ prefix: String.UTF8View) -> Bool {
        guard count >= prefix.count else { return false }
        let compared: Bool?? = withContiguousStorageIfAvailable { mine in
            prefix.withContiguousStorageIfAvailable { theirs in
                theirs.isEmpty || memcmp(mine.baseAddress!, theirs.baseAddress!, theirs.count) == 0
            }
        }
        if let compared, let compared { return compared }
        return starts(with: prefix)
    }

    /// Whether these bytes are `other`'s, compared as ``hasBytePrefix(_:)`` does.
    func isBytes(_ other: String.UTF8View) -> Bool { count == other.count && hasBytePrefix(other) }
}
