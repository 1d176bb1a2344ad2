import CStatfs
import Glibc

/// Another program run and watched: `check-host` runs a host's apply command in a directory of
/// its own, may kill it at any instant, and must not leave its children behind.
package final class SpawnedProcess {
    package let pid: pid_t
    /// Its exit status, once reaped.
    private var reaped: Int32?

    private typealias ChangeDirectory = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, UnsafePointer<CChar>) -> Int32
    private typealias CloseFrom = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32
    // glibc ≥ 2.34 has both; the Glibc module does not show them.
    private static let changeDirectory = dlsym(dlopen(nil, RTLD_NOW), "posix_spawn_file_actions_addchdir_np").map { unsafeBitCast($0, to: ChangeDirectory.self) }
    private static let closeFrom = dlsym(dlopen(nil, RTLD_NOW), "posix_spawn_file_actions_addclosefrom_np").map { unsafeBitCast($0, to: CloseFrom.self) }

    /// Adds "close every descriptor from `first` on" to `actions`, where the C library can.
    package static func closeDescriptors(from first: Int32, in actions: inout posix_spawn_file_actions_t) {
        if let closeFrom { _ = closeFrom(&actions, first) }
    }

    /// Starts `argv` (searched on the PATH, no shell) in `directory`, in a process group of its
    /// own, with `environment` added to this process's, stdin from /dev/null and its output
    /// appended to `log`.
    package init(_ argv: [String], directory: String, environment: [String: String], log: String) throws(SystemError) {
        guard let changeDirectory = SpawnedProcess.changeDirectory else {
            throw SystemError(operation: "run (this C library cannot start a program in a directory)", path: argv[0], code: ENOSYS)
        }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, log, O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW, 0o600)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)
        SpawnedProcess.closeDescriptors(from: 3, in: &actions)
        _ = changeDirectory(&actions, directory)

        pid = try Posix.spawn(argv, actions: &actions, defaults: [SIGTERM, SIGINT, SIGHUP, SIGPIPE, SIGCHLD],
                              ownGroup: true, environment: environment)
        // pidfd_open(2): readable once it has ended (-1 where the kernel has none: then polled).
        let descriptor = basket_sync_pidfd_open(pid)
        if descriptor >= 0 { _ = fcntl(descriptor, F_SETFD, FD_CLOEXEC) }
        endFD = descriptor
    }

    deinit { if endFD >= 0 { Glibc.close(endFD) } }

    /// A descriptor that becomes readable when it ends (pidfd), or -1: poll it beside others to
    /// wake at its end rather than look at intervals.
    package let endFD: Int32

    /// Its exit status (128 + the signal that killed it) once it has ended, without waiting; nil
    /// while it runs.
    package func exitStatus() -> Int32? {
        if let reaped { return reaped }
        var status: Int32 = 0
        while true {
            let result = waitpid(pid, &status, WNOHANG)
            if result == pid {
                let signal = status & 0x7F
                reaped = signal == 0 ? (status >> 8) & 0xFF : 128 + signal
                return reaped
            }
            if result == -1, errno == EINTR { continue }
            return nil
        }
    }

    /// Kills it and everything it started (its process group), and reaps it.
    package func killAll() {
        kill(-pid, SIGKILL)
        guard reaped == nil else { return }
        kill(pid, SIGKILL)
        var status: Int32 = 0
        while waitpid(pid, &status, 0) == -1, errno == EINTR {}
        reaped = 128 + SIGKILL
    }
}

extension Posix {
    /// Starts `argv` (searched on the PATH, no shell) with `actions`: the child gets an empty
    /// signal mask, the default action for `defaults`, a process group of its own when
    /// `ownGroup`, and this process's environment with `environment` set over it.
    package static func spawn(_ argv: [String], actions: inout posix_spawn_file_actions_t, defaults: [Int32],
                      ownGroup: Bool = false, environment: [String: String] = [:]) throws(SystemError) -> pid_t {
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var empty = sigset_t()
        sigemptyset(&empty)
        var defaultSet = sigset_t()
        sigemptyset(&defaultSet)
        for signal in defaults { sigaddset(&defaultSet, signal) }
        posix_spawnattr_setsigmask(&attributes, &empty)
        posix_spawnattr_setsigdefault(&attributes, &defaultSet)
        if ownGroup { posix_spawnattr_setpgroup(&attributes, 0) }
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | (ownGroup ? POSIX_SPAWN_SETPGROUP : 0)))

        var variables: [String] = []
        var index = 0
        while let entry = environ[index] {
            let text = String(cString: entry)
            if let name = text.split(separator: "=", maxSplits: 1).first, environment[String(name)] == nil { variables.append(text) }
            index += 1
        }
        variables += environment.map { "\($0.key)=\($0.value)" }
        var cArguments: [UnsafeMutablePointer<CChar>?] = argv.map { strdup($0) } + [nil]
        var cEnvironment: [UnsafeMutablePointer<CChar>?] = variables.map { strdup($0) } + [nil]
        defer {
            for pointer in cArguments { free(pointer) }
            for pointer in cEnvironment { free(pointer) }
        }
        var pid = pid_t()
        let result = posix_spawnp(&pid, argv[0], &actions, &attributes, &cArguments, &cEnvironment)
        guard result == 0 else { throw SystemError(operation: "run", path: argv[0], code: result) }
        return pid
    }

    /// A new directory of mode 0700 with a unique name, from `template` ending in XXXXXX.
    package static func makeTemporaryDirectory(_ template: String) throws(SystemError) -> String {
        var bytes = Array(template.utf8CString)
        guard mkdtemp(&bytes) != nil else { throw .last("create a temporary directory", template) }
        return String(decoding: bytes.dropLast().map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// Sleeps `microseconds` (a few milliseconds at most, between two looks at a running program).
    package static func pause(microseconds: UInt32) { usleep(microseconds) }
}

extension Posix {
    /// Whether `path` is on a file system mounted read-only.
    package static func isReadOnlyFileSystem(_ path: String) -> Bool {
        var info = statvfs()
        return statvfs(path, &info) == 0 && info.f_flag & UInt(ST_RDONLY) != 0
    }
}

import Synchronization

/// SIGINT, SIGTERM and SIGHUP turned into a flag a long-running command looks at between steps, so that
/// it can stop what it started and clean up before it exits.
package enum Interruption {
    private static let flag = Atomic<Bool>(false)

    /// From now on SIGINT, SIGTERM and SIGHUP (the terminal closed) set the flag instead of
    /// ending the process.
    package static func catchSignals() {
        for signal in [SIGINT, SIGTERM, SIGHUP] {
            _ = Glibc.signal(signal) { _ in Interruption.flag.store(true, ordering: .relaxed) }
        }
    }

    /// Whether SIGINT, SIGTERM or SIGHUP came.
    package static var requested: Bool { flag.load(ordering: .relaxed) }
}
