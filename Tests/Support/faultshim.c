// A test seam loaded with LD_PRELOAD under the real basket-sync binary (never shipped).
//
// FAULTSHIM_LOG=FILE   appends one line per durability-relevant call, in call order:
//                      "write PATH SIZE_AFTER", "fsync PATH SIZE", "fdatasync PATH SIZE",
//                      "rename FROM TO"; PATH is the file behind the descriptor.
// FAULTSHIM_EIO=TEXT   fsync and fdatasync of a path containing TEXT fail with EIO while the file
// FAULTSHIM_WHILE=FILE exists (remove it to lift the fault); so does syncfs of any file system
//                      meanwhile (a file on it failed: its error shows there too).
// FAULTSHIM_HOLD=TEXT  fsync of a path containing TEXT first creates FILE.held, then waits until
// FAULTSHIM_GO=FILE    FILE exists (ten minutes at most): a test's step between two calls.
// FAULTSHIM_HOLD_CHDIR=1 chdir first creates FAULTSHIM_GO's FILE.held, then waits until FILE
//                      exists: the instant between a folder's check and its entry.
// FAULTSHIM_HOLD_OPEN=TEXT an open or openat of a path containing TEXT does the same first.
// FAULTSHIM_CLOCK=FILE the wall clock (CLOCK_REALTIME, gettimeofday) is stepped by the seconds
//                      FILE holds, read at each call (a clock set back or forward under a running
//                      process); the monotonic and boot clocks are left alone.
// FAULTSHIM_WATCHES=N  inotify_add_watch fails with ENOSPC once this process holds N watches, as
//                      when other programs of the same user hold the rest of
//                      fs.inotify.max_user_watches (the sysctl itself is the whole machine's).
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdarg.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static void path_of(int fd, char *out, size_t size) {
    char link[64];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, out, size - 1);
    out[n < 0 ? 0 : n] = 0;
}

static long long size_of(int fd) {
    struct stat info;
    return fstat(fd, &info) == 0 ? (long long)info.st_size : -1;
}

static void note(const char *line) {
    const char *log = getenv("FAULTSHIM_LOG");
    if (!log) return;
    static ssize_t (*real_write)(int, const void *, size_t);
    if (!real_write) real_write = dlsym(RTLD_NEXT, "write");
    int fd = open(log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return;
    real_write(fd, line, strlen(line));
    close(fd);
}

static int failing(const char *path) {
    const char *text = getenv("FAULTSHIM_EIO");
    const char *flag = getenv("FAULTSHIM_WHILE");
    return text && flag && strstr(path, text) && access(flag, F_OK) == 0;
}

ssize_t write(int fd, const void *buffer, size_t count) {
    static ssize_t (*real)(int, const void *, size_t);
    if (!real) real = dlsym(RTLD_NEXT, "write");
    ssize_t result = real(fd, buffer, count);
    if (result > 0 && getenv("FAULTSHIM_LOG") && fd > 2) {
        char path[4096], line[8300];
        path_of(fd, path, sizeof path);
        if (strstr(path, ".jsonl") || strstr(path, "/inbox/") || strstr(path, ".tmp")) {
            snprintf(line, sizeof line, "write %s %lld\n", path, size_of(fd));
            note(line);
        }
    }
    return result;
}

static void hold(const char *path) {
    const char *text = getenv("FAULTSHIM_HOLD");
    const char *go = getenv("FAULTSHIM_GO");
    if (!text || !go || !strstr(path, text)) return;
    char held[4200];
    snprintf(held, sizeof held, "%s.held", go);
    close(open(held, O_WRONLY | O_CREAT | O_CLOEXEC, 0644));
    for (int i = 0; i < 60000 && access(go, F_OK) != 0; i++) usleep(10000);
}

static void hold_open(const char *path) {
    const char *text = getenv("FAULTSHIM_HOLD_OPEN");
    const char *go = getenv("FAULTSHIM_GO");
    if (!text || !go || !path || !strstr(path, text) || access(go, F_OK) == 0) return;
    char held[4200];
    snprintf(held, sizeof held, "%s.held", go);
    close(open(held, O_WRONLY | O_CREAT | O_CLOEXEC, 0644));
    for (int i = 0; i < 60000 && access(go, F_OK) != 0; i++) usleep(10000);
}

// The mode an open's variadic argument holds (only with O_CREAT or O_TMPFILE); inside the wrapper.
#define MODE_OF(flags) ({ mode_t mode = 0; if (((flags) & O_CREAT) || ((flags) & __O_TMPFILE) == __O_TMPFILE) { \
    va_list arguments; va_start(arguments, flags); mode = (mode_t)va_arg(arguments, int); va_end(arguments); } mode; })

static int held_open(const char *symbol, const char *path, int flags, mode_t mode) {
    int (*real)(const char *, int, ...) = dlsym(RTLD_NEXT, symbol);
    hold_open(path);
    return real(path, flags, mode);
}

static int held_openat(const char *symbol, int dirfd, const char *path, int flags, mode_t mode) {
    int (*real)(int, const char *, int, ...) = dlsym(RTLD_NEXT, symbol);
    hold_open(path);
    return real(dirfd, path, flags, mode);
}

int open(const char *path, int flags, ...) { return held_open("open", path, flags, MODE_OF(flags)); }
int open64(const char *path, int flags, ...) { return held_open("open64", path, flags, MODE_OF(flags)); }
int openat(int dirfd, const char *path, int flags, ...) { return held_openat("openat", dirfd, path, flags, MODE_OF(flags)); }
int openat64(int dirfd, const char *path, int flags, ...) { return held_openat("openat64", dirfd, path, flags, MODE_OF(flags)); }

int chdir(const char *path) {
    static int (*real_chdir)(const char *);
    if (!real_chdir) real_chdir = dlsym(RTLD_NEXT, "chdir");
    const char *go = getenv("FAULTSHIM_GO");
    if (getenv("FAULTSHIM_HOLD_CHDIR") && go) {
        char held[4200];
        snprintf(held, sizeof held, "%s.held", go);
        close(open(held, O_WRONLY | O_CREAT | O_CLOEXEC, 0644));
        for (int i = 0; i < 60000 && access(go, F_OK) != 0; i++) usleep(10000);
    }
    return real_chdir(path);
}

static int sync_call(const char *name, int fd) {
    static int (*real_fsync)(int), (*real_fdatasync)(int);
    if (!real_fsync) real_fsync = dlsym(RTLD_NEXT, "fsync");
    if (!real_fdatasync) real_fdatasync = dlsym(RTLD_NEXT, "fdatasync");
    char path[4096], line[8300];
    path_of(fd, path, sizeof path);
    hold(path);
    if (failing(path)) {
        snprintf(line, sizeof line, "%s-EIO %s %lld\n", name, path, size_of(fd));
        note(line);
        errno = EIO;
        return -1;
    }
    int result = strcmp(name, "fsync") == 0 ? real_fsync(fd) : real_fdatasync(fd);
    if (result == 0) {
        snprintf(line, sizeof line, "%s %s %lld\n", name, path, size_of(fd));
        note(line);
    }
    return result;
}

int fsync(int fd) { return sync_call("fsync", fd); }

int syncfs(int fd) {
    static int (*real)(int);
    if (!real) real = dlsym(RTLD_NEXT, "syncfs");
    char path[4096], line[8300];
    path_of(fd, path, sizeof path);
    const char *text = getenv("FAULTSHIM_EIO");
    const char *flag = getenv("FAULTSHIM_WHILE");
    if (text && flag && access(flag, F_OK) == 0) {
        snprintf(line, sizeof line, "syncfs-EIO %s 0\n", path);
        note(line);
        errno = EIO;
        return -1;
    }
    int result = real(fd);
    if (result == 0) {
        snprintf(line, sizeof line, "syncfs %s 0\n", path);
        note(line);
    }
    return result;
}
int fdatasync(int fd) { return sync_call("fdatasync", fd); }

// A path through a folder held open ("/proc/self/fd/N/name") named by the folder's own path.
static void resolved(const char *path, char *out, size_t size) {
    int fd;
    int used = 0;
    if (sscanf(path, "/proc/self/fd/%d%n", &fd, &used) == 1 && used > 0) {
        char folder[4096];
        path_of(fd, folder, sizeof folder);
        snprintf(out, size, "%s%s", folder, path + used);
    } else {
        snprintf(out, size, "%s", path);
    }
}

int rename(const char *from, const char *to) {
    static int (*real)(const char *, const char *);
    if (!real) real = dlsym(RTLD_NEXT, "rename");
    int result = real(from, to);
    if (result == 0) {
        char line[8300], source[4096], target[4096];
        resolved(from, source, sizeof source);
        resolved(to, target, sizeof target);
        snprintf(line, sizeof line, "rename %s %s\n", source, target);
        note(line);
    }
    return result;
}

// renameat names each side by the folder held open and the name in it (how basket-sync reaches
// the files of a folder it opened once).
static void resolved_at(int dirfd, const char *name, char *out, size_t size) {
    if (dirfd == AT_FDCWD || name[0] == '/') {
        resolved(name, out, size);
        return;
    }
    char folder[4096];
    path_of(dirfd, folder, sizeof folder);
    snprintf(out, size, "%s/%s", folder, name);
}

// A rename done, noted as "rename FROM TO".
static void note_rename_at(int fromfd, const char *from, int tofd, const char *to) {
    char line[8300], source[4096], target[4096];
    resolved_at(fromfd, from, source, sizeof source);
    resolved_at(tofd, to, target, sizeof target);
    snprintf(line, sizeof line, "rename %s %s\n", source, target);
    note(line);
}

int renameat(int fromfd, const char *from, int tofd, const char *to) {
    static int (*real)(int, const char *, int, const char *);
    if (!real) real = dlsym(RTLD_NEXT, "renameat");
    int result = real(fromfd, from, tofd, to);
    if (result == 0) note_rename_at(fromfd, from, tofd, to);
    return result;
}

// renameat2 (apply's swap of the cart, RENAME_EXCHANGE, and its rename where nothing is,
// RENAME_NOREPLACE): noted as the others are.
int renameat2(int fromfd, const char *from, int tofd, const char *to, unsigned int flags) {
    static int (*real)(int, const char *, int, const char *, unsigned int);
    if (!real) real = dlsym(RTLD_NEXT, "renameat2");
    int result = real(fromfd, from, tofd, to, flags);
    if (result == 0) note_rename_at(fromfd, from, tofd, to);
    return result;
}

static long long clock_step(void) {
    const char *file = getenv("FAULTSHIM_CLOCK");
    if (!file) return 0;
    int fd = open(file, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    char text[32] = {0};
    static ssize_t (*real_read)(int, void *, size_t);
    if (!real_read) real_read = dlsym(RTLD_NEXT, "read");
    real_read(fd, text, sizeof text - 1);
    close(fd);
    return atoll(text);
}

int clock_gettime(clockid_t clock, struct timespec *time) {
    static int (*real)(clockid_t, struct timespec *);
    if (!real) real = dlsym(RTLD_NEXT, "clock_gettime");
    int result = real(clock, time);
    if (result == 0 && (clock == CLOCK_REALTIME || clock == CLOCK_REALTIME_COARSE)) time->tv_sec += clock_step();
    return result;
}

int gettimeofday(struct timeval *restrict time, void *restrict zone) {
    static int (*real)(struct timeval *restrict, void *restrict);
    if (!real) real = dlsym(RTLD_NEXT, "gettimeofday");
    int result = real(time, zone);
    if (result == 0 && time) time->tv_sec += clock_step();
    return result;
}

// The watch descriptors this process holds (a descriptor given again for a watched inode is one).
static unsigned char held_watch[1 << 20];
static int held_watches;

int inotify_add_watch(int fd, const char *path, uint32_t mask) {
    static int (*real)(int, const char *, uint32_t);
    if (!real) real = dlsym(RTLD_NEXT, "inotify_add_watch");
    const char *limit = getenv("FAULTSHIM_WATCHES");
    if (limit && held_watches >= atoi(limit)) {
        // A watch already held is only changed: that needs no new one.
        int existing = real(fd, path, mask | IN_MASK_ADD);
        if (existing >= 0 && existing < (1 << 20) && held_watch[existing]) return real(fd, path, mask);
        if (existing >= 0 && existing < (1 << 20)) inotify_rm_watch(fd, existing);
        errno = ENOSPC;
        return -1;
    }
    int result = real(fd, path, mask);
    if (result >= 0 && result < (1 << 20) && !held_watch[result]) {
        held_watch[result] = 1;
        held_watches++;
    }
    return result;
}

int inotify_rm_watch(int fd, int watch) {
    static int (*real)(int, int);
    if (!real) real = dlsym(RTLD_NEXT, "inotify_rm_watch");
    if (watch >= 0 && watch < (1 << 20) && held_watch[watch]) {
        held_watch[watch] = 0;
        held_watches--;
    }
    return real(fd, watch);
}
