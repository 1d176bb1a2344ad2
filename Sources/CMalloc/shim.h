// glibc's malloc_trim(3), which Swift's Glibc module does not export: after a large cart the
// agent gives the freed heap back to the system, so its resident memory falls back.
#include <malloc.h>
