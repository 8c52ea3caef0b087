# The glue's files from glue_files.txt (the one list; # starts a comment):
# CACHEALLOC_GLUE_FILES (every file, names relative to bindings/torch) and
# CACHEALLOC_GLUE_SOURCES (its .cpp files).
file(STRINGS ${CMAKE_CURRENT_LIST_DIR}/glue_files.txt CACHEALLOC_GLUE_FILES REGEX "^[^#]")
set(CACHEALLOC_GLUE_SOURCES ${CACHEALLOC_GLUE_FILES})
list(FILTER CACHEALLOC_GLUE_SOURCES INCLUDE REGEX "\\.cpp$")
