// glibc's statfs(2), which Swift's Glibc module does not export: its f_type tells a network or
// FUSE file system (where inotify cannot see other machines' writes) from a local one.
#include <sys/vfs.h>

// pidfd_open(2), which glibc wraps only from 2.36 and Swift cannot call through variadic
// syscall(2): a descriptor readable once the process has ended (-1 where the kernel has none).
#include <sys/syscall.h>
#include <unistd.h>
static inline int basket_sync_pidfd_open(int pid) {
#ifdef SYS_pidfd_open
    return (int)syscall(SYS_pidfd_open, pid, 0);
#else
    return -1;
#endif
}

// prctl(PR_SET_CHILD_SUBREAPER), variadic in C: the orphans among this process's descendants are
// given to it (a completion whose supervisor was killed), so that it can wait for them.
#include <sys/prctl.h>
static inline int basket_sync_become_subreaper(void) {
    return prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
}

// waitid(2) with WNOWAIT: waits for child `pid` to end and says how, without reaping it — a
// supervisor records a completion's end before the zombie goes, so that killed in between, the
// process it is given to can still read it. The status as a shell says it (the exit status, or
// 128 + the signal), or -1.
#include <sys/wait.h>
#include <errno.h>
#include <string.h>
static inline int basket_sync_wait_unreaped(int pid) {
    siginfo_t info;
    memset(&info, 0, sizeof info);
    int result;
    do { result = waitid(P_PID, (id_t)pid, &info, WEXITED | WNOWAIT); } while (result < 0 && errno == EINTR);
    if (result < 0) return -1;
    return info.si_code == CLD_EXITED ? (info.si_status & 0xFF) : 128 + info.si_status;
}

// syncfs(2), which Swift's Glibc module does not export (it needs _GNU_SOURCE): writes back a
// whole file system at once — many small files made durable together.
int syncfs(int fd);
static inline int basket_sync_syncfs(int fd) { return syncfs(fd); }

// getdents64(2), which glibc wraps only under _GNU_SOURCE and Swift cannot call through variadic
// syscall(2): a directory's entries read straight into `buffer` (linux_dirent64 records), without
// the fstat and fcntl calls fdopendir(3) makes first.
static inline long basket_sync_getdents64(int fd, void *buffer, unsigned long size) {
    return syscall(SYS_getdents64, fd, buffer, size);
}

// renameat2(2), which glibc declares only under _GNU_SOURCE (and wraps from 2.28):
// RENAME_NOREPLACE (1) renames only where nothing is; RENAME_EXCHANGE (2) swaps two names in one
// step, so that the file a rename would have replaced is kept under the other name, to be judged
// (and put back) rather than lost. -1 with errno EINVAL where the file system cannot (the caller
// then renames as before).
int renameat2(int fromDirectory, const char *from, int toDirectory, const char *to, unsigned int flags);
static inline int basket_sync_renameat2(int fromDirectory, const char *from, int toDirectory, const char *to, unsigned int flags) {
    return renameat2(fromDirectory, from, toDirectory, to, flags);
}
