# Turns the file IN into a C++ source OUT defining `bulkhead::api::kOpenApiJson`.
file(READ ${IN} content HEX)
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${content}")
file(WRITE ${OUT} "#include <string_view>\nnamespace bulkhead::api {\nstatic const char kData[] = {${bytes} 0};\nextern const std::string_view kOpenApiJson(kData, sizeof(kData) - 1);\n}\n")
