// glibc's statfs(2), which Swift's Glibc module does not export: its f_type tells a network or
// FUSE file system (where inotify cannot see other machines' writes) from a local one.
#include <sys/vfs.h>
