# Included by the Makefiles of the libraries mounted into containers (libvgpu.so, the simulated
# libcuda.so.1 and libnvidia-ml.so.1), after BUILD and HEADERS: they need nothing newer than
# glibc 2.17 (glibc_floor.h says why). Link with $(FLOOR_OBJ) and $(FLOOR_LIBS).
FLOOR_DIR  := $(dir $(lastword $(MAKEFILE_LIST)))
CFLAGS     += -include $(FLOOR_DIR)glibc_floor.h
LDFLAGS    += -Wl,--wrap=fstat -Wl,--wrap=memfd_create
# Before glibc 2.34 dlopen and pthread_* live in libdl and libpthread: name them so an old
# loader loads them (on a newer glibc they are empty stand-ins).
FLOOR_LIBS := -Wl,--no-as-needed -l:libdl.so.2 -l:libpthread.so.0
FLOOR_OBJ  := $(BUILD)/glibc_floor.o
HEADERS    += $(FLOOR_DIR)glibc_floor.h

# A pattern rule, so that including this file does not change the default goal.
$(BUILD)/%.o: $(FLOOR_DIR)%.c $(FLOOR_DIR)glibc_floor.h | $(BUILD)
	$(CC) $(CFLAGS) -c $< -o $@
