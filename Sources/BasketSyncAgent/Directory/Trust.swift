import Glibc

/// Who basket-sync trusts with what (docs/spec.md §7). Its own files — the configuration
/// (`basket-sync.json`), `.basket-sync/` and the database in it — are used only when owned by
/// the account basket-sync runs as, or by root, and writable by nobody else; the directory that
/// holds them must be owned the same way, and when others may write it, carry the sticky bit so
/// nobody renames over those files. As ssh's StrictModes: whoever can write the directory
/// could otherwise choose basket-sync's settings (follow links to files only it may read) or
/// its database (whose names it unlinks).
enum Trust {
    /// Why `info`, the file or directory at `path`, must not be used as basket-sync's own (nil
    /// when it may): one sentence naming it, who owns it or may write it, and the command that
    /// fixes it. `what` says what it is ("the configuration"); `otherwise`, what to do with a
    /// file that is not basket-sync's.
    static func refusal(_ info: FileInfo, path: String, what: String, otherwise: String = "otherwise remove it", as me: UInt32 = geteuid()) -> String? {
        if info.owner != me, info.owner != 0 {
            return "\(path): \(what) is owned by \(account(info.owner)), not by the account basket-sync runs as (\(account(me))) nor root: whoever can write the directory may have put it there, and basket-sync uses its own files only. If it is basket-sync's, chown \(me) \(path); \(otherwise)"
        }
        if info.mode & 0o022 != 0 {
            let by = info.mode & 0o020 != 0 ? (info.mode & 0o002 != 0 ? "its group and others" : "its group") : "others"
            return "\(path): \(what) is writable by \(by) (mode \(octal(info.mode))): basket-sync uses its own files only when nobody else may change them; chmod go-w \(path)"
        }
        return nil
    }

    /// Why `directory`, which holds basket-sync's own files, must not be trusted with them (nil
    /// when it may): owned by another account than this one or root, or writable by others
    /// without the sticky bit (then anyone who may write it can rename their own file over
    /// basket-sync's).
    static func directoryRefusal(_ directory: String, as me: UInt32 = geteuid()) -> String? {
        guard let info = Posix.info(directory, follow: true), info.kind == .directory else { return nil }
        if info.owner != me, info.owner != 0 {
            return "\(directory): the directory holding basket-sync's configuration and database is owned by \(account(info.owner)), not by the account basket-sync runs as (\(account(me))) nor root: its owner may replace them. Run basket-sync as that account, or chown \(me) \(directory)"
        }
        if info.mode & 0o022 != 0, info.mode & 0o1000 == 0 {
            return "\(directory): writable by others (mode \(octal(info.mode))) without the sticky bit: anyone who may write it can rename a file of theirs over basket-sync's configuration or database. chmod +t \(directory) (basket-sync init --shared GROUP sets a shared directory up), or chmod go-w \(directory)"
        }
        return nil
    }

    /// Why a file basket-sync appends to but did not make must not be written (an output file
    /// another account made first at its name): nil when it is basket-sync's (owned by this
    /// account or root).
    static func foreignOutput(_ info: FileInfo) -> String? {
        let me = geteuid()
        guard info.owner != me, info.owner != 0 else { return nil }
        return "is owned by \(account(info.owner)), not by the account basket-sync runs as (\(account(me))): basket-sync appends only to files it made. Move it away (the next record starts a new file)"
    }

    /// An account as people know it: `uid 1001 (alice)`.
    static func account(_ uid: UInt32) -> String {
        guard let entry = getpwuid(uid), let name = entry.pointee.pw_name else { return "uid \(uid)" }
        return "uid \(uid) (\(String(cString: name)))"
    }

    static func octal(_ mode: UInt32) -> String {
        let digits = String(mode & 0o7777, radix: 8)
        return String(repeating: "0", count: max(0, 4 - digits.count)) + digits
    }
}
