// binding_registry.h: how kernels/*_binding.cpp files add functions to the cuda_extension module
// without anyone editing binding.cpp. Each binding file ends with
//     REGISTER_BINDING(my_op, register_my_op);
// whose static object records register_my_op before the module is imported; binding.cpp then
// applies every recorded function to the module. Fixed file: restored from a trusted copy.
#pragma once

#include <functional>
#include <stdexcept>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include <pybind11/pybind11.h>

namespace kgym
{

using BindingFn = std::function<void(pybind11::module_ &)>;

// A function-local static: built on first use, so a registration running from another source
// file's static initialiser never finds it unconstructed (static init order is unspecified).
// `inline` gives one list for the whole extension, whichever file calls it.
inline std::vector<std::pair<std::string, BindingFn>> &binding_list()
{
    static std::vector<std::pair<std::string, BindingFn>> list;
    return list;
}

struct BindingRegistrar {
    BindingRegistrar(const char *name, BindingFn fn)
    {
        binding_list().emplace_back(name, std::move(fn));
    }
};

// Called once by binding.cpp. Two registrations under one name are refused: the import fails
// with a message instead of one silently shadowing the other.
inline void apply_bindings(pybind11::module_ &m)
{
    std::unordered_set<std::string> seen;
    for (auto &entry : binding_list()) {
        if (!seen.insert(entry.first).second)
            throw std::runtime_error("REGISTER_BINDING(" + entry.first + ") appears twice");
        entry.second(m);
    }
}

} // namespace kgym

#define REGISTER_BINDING(name, fn)                                                                 \
    static ::kgym::BindingRegistrar kgym_registrar_##name(#name,                                   \
                                                          [](pybind11::module_ &m) { fn(m); })
