#ifndef BASKET_SYNC_CSQLITE_SHIM_H
#define BASKET_SYNC_CSQLITE_SHIM_H
#include <sqlite3.h>
#endif
