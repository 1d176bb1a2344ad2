#ifndef BASKET_SYNC_CINOTIFYTOOLS_SHIM_H
#define BASKET_SYNC_CINOTIFYTOOLS_SHIM_H
// libinotifytools0-dev ships no pkg-config file: the header and `-linotifytools` are named here.
#include <sys/inotify.h>
#include <inotifytools/inotifytools.h>
#endif
