import Glibc
import CStatfs

/// What `statfs(2)` says of the file system holding a path: its name, and whether inotify is
/// blind there to writes made elsewhere (another machine of a share, the daemon of a FUSE mount).
struct FileSystemKind: Equatable {
    /// Its usual name (`ext4`, `nfs`, `fuse`…), or its magic number when unknown.
    var name: String
    /// Whether writes made elsewhere never reach this kernel's inotify: network and userspace
    /// file systems.
    var isBlindToInotify: Bool

    /// The file system of `path`; nil when `statfs` fails (the path does not exist).
    static func of(_ path: String) -> FileSystemKind? {
        var info = statfs()
        guard Posix.retrying({ statfs(path, &info) }) == 0 else { return nil }
        let magic = UInt32(truncatingIfNeeded: Int64(info.f_type))
        if let blind = blind[magic] { return FileSystemKind(name: blind, isBlindToInotify: true) }
        return FileSystemKind(name: local[magic] ?? "type 0x" + String(magic, radix: 16), isBlindToInotify: false)
    }

    /// Network, cluster and userspace file systems (linux/magic.h and the file systems' own).
    private static let blind: [UInt32: String] = [
        0x6969: "nfs", 0x517B: "smb", 0xFF53_4D42: "cifs", 0xFE53_4D42: "smb2", 0x6573_5546: "fuse",
        0x0102_1997: "9p", 0x00C3_6400: "ceph", 0x5346_414F: "afs", 0x6B41_4653: "afs", 0x7375_7245: "coda",
        0x564C: "ncp", 0x0116_1970: "gfs2", 0x7461_636F: "ocfs2", 0x0BD0_0BD0: "lustre", 0x4750_4653: "gpfs",
        0x1983_0326: "orangefs", 0x786F_4256: "vboxsf",
    ]

    /// Local file systems, named in the log.
    private static let local: [UInt32: String] = [
        0xEF53: "ext4", 0x5846_5342: "xfs", 0x9123_683E: "btrfs", 0x0102_1994: "tmpfs", 0x794C_7630: "overlayfs",
        0x2FC1_2FC1: "zfs", 0xF2F5_2010: "f2fs", 0x4D44: "vfat", 0x2011_BAB0: "exfat", 0x5346_544E: "ntfs",
        0x3153_464A: "jfs", 0x5265_4973: "reiserfs", 0x858458F6: "ramfs",
    ]
}

extension FileSystemKind {
    /// The least room basket-sync needs to record anything (a commit writes a few pages).
    static let leastRoom: UInt64 = 64 * 1024

    /// Why the file system holding `path` has no room left for files of `owner` (root may
    /// use the blocks reserved for it): under ``leastRoom`` free, or no inode left; nil when
    /// there is room, or `statfs` fails.
    static func full(_ path: String, forOwner owner: UInt32) -> String? {
        var info = statfs()
        guard Posix.retrying({ statfs(path, &info) }) == 0 else { return nil }
        let blocks = owner == 0 ? UInt64(info.f_bfree) : UInt64(info.f_bavail)
        let room = blocks * UInt64(info.f_bsize)
        if room < leastRoom { return "the file system holding \(path) is full (\(room / 1024) KiB left)" }
        if info.f_files > 0, info.f_ffree == 0 { return "the file system holding \(path) has no inode left" }
        return nil
    }
}
