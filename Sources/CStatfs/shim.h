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
